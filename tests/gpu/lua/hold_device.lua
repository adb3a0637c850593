-- Holds the rank's device until the file named by arg[1] exists (at most 60 s), after
-- saying so on stdout: the other rank of test_gpu_bad_input.sh then asks for the same GPU.
local ds = require 'ds'
print('holding the device')
io.stdout:flush()
local deadline = ds.now() + 60
while ds.now() < deadline do
  local f = io.open(arg[1])
  if f then f:close() return end
  os.execute('sleep 0.05')
end
error('nobody released ' .. arg[1])
