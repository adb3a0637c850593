-- Every rank starts two processes that escape its process group and session (setsid,
-- one of them with a child of its own), says it is ready, then runs until stopped.
local ds = require 'ds'
assert(os.execute('setsid sleep 300 < /dev/null > /dev/null 2>&1 &'))
assert(os.execute('setsid sh -c "sleep 301 & exec sleep 302" < /dev/null > /dev/null 2>&1 &'))
ds.barrier()
print('ready ' .. ds.rank())
io.stdout:flush()
while true do os.execute('sleep 0.1') end
