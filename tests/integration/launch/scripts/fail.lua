-- Rank 3 fails with exit code 3 after the barrier; the others would run forever.
local ds = require 'ds'
ds.barrier()
print('rank ' .. ds.rank() .. ' running')
if ds.rank() == 3 then
  os.execute('sleep 0.3')
  io.stderr:write('rank 3 is failing on purpose\n')
  os.exit(3)
end
while true do os.execute('sleep 0.1') end
