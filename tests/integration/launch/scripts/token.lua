-- Every rank waits for the test to create FLAG_FILE (after it tried a bad store
-- client), then passes a barrier: the store must still work. The store token is not in
-- the script's environment, nor in what it starts.
local ds = require 'ds'
assert(os.getenv('DS_STORE_TOKEN') == nil, 'the script sees DS_STORE_TOKEN')
assert(io.popen('echo "${DS_STORE_TOKEN:-none}"'):read('l') == 'none', 'a child sees DS_STORE_TOKEN')
print('waiting ' .. ds.rank())
local flag = assert(os.getenv('FLAG_FILE'), 'FLAG_FILE not set')
local deadline = os.time() + 60
while true do
  local f = io.open(flag)
  if f then f:close() break end
  if os.time() > deadline then error('no flag file after 60 s') end
  os.execute('sleep 0.05')
end
ds.barrier()
print('done ' .. ds.rank())
