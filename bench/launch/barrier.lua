-- Launch benchmark: every rank passes one barrier and writes when (in /proc/uptime
-- seconds, the clock the benchmark script also reads). With FAIL_RANK set, that rank
-- then exits 1 and the others block in a store get (no CPU) until they are stopped.
local ds = require 'ds'
local function uptime()
  local f = assert(io.open('/proc/uptime'))
  local t = f:read('n')
  f:close()
  return t
end
ds.barrier()
io.write(string.format('past %.2f\n', uptime()))
io.flush()
local fail = tonumber(os.getenv('FAIL_RANK') or '')
if fail == nil then return end
if ds.rank() == fail then
  io.write(string.format('failing %.2f\n', uptime()))
  io.flush()
  os.exit(1)
end
ds.store.get('never-set', 3600)
