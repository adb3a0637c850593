-- Every rank leaves a process behind in a new session (out of its process group),
-- then exits 0: the agent must still clean it up.
local ds = require 'ds'
assert(os.execute('setsid sleep 300 < /dev/null > /dev/null 2>&1 &'))
print('left a daemon ' .. ds.rank())
