-- Root-cause trial: in each attempt one rank (the victim) fails in one of several ways
-- while every other rank is inside an all-reduce loop, so the peers fail too (their
-- communicator breaks) or are stopped. Victim, way and moment come from RC_SEED and the
-- attempt; rank 0 prints them ("plan attempt A victim R mode M") for the test to check
-- the summary's root cause against.
local ds = require 'ds'
local seed = math.tointeger(tonumber(os.getenv('RC_SEED') or '1'))
local a = ds.attempt()
local state = (seed * 1000003 + a * 7919) % 2147483647
local function rnd(n)
  state = (state * 48271) % 2147483647
  return state % n
end
local world = ds.world_size()
local victim = rnd(world)
local modes = {'lua_error', 'exit', 'sigkill', 'sigsegv', 'abort', 'c_error'}
local mode = modes[rnd(#modes) + 1]
local at_step = 2 + rnd(4)
if ds.rank() == 0 then print(string.format('plan attempt %d victim %d mode %s step %d', a, victim, mode, at_step)) end
io.stdout:flush()

local function self_pid()
  local f = assert(io.open('/proc/self/stat'))
  local pid = f:read('n')
  f:close()
  return math.tointeger(pid)
end

local function fail(how)
  if how == 'lua_error' then error('victim raised an error')
  elseif how == 'exit' then os.exit(7)
  elseif how == 'sigkill' then os.execute('kill -KILL ' .. self_pid())
  elseif how == 'sigsegv' then os.execute('kill -SEGV ' .. self_pid())
  elseif how == 'abort' then os.execute('kill -ABRT ' .. self_pid())
  elseif how == 'c_error' then ds.tensor('fp32', 2, 3):copy(ds.tensor('fp32', 5))
  end
  os.execute('sleep 5') -- a signal sent to ourselves may take a moment
end

local t = ds.tensor('fp32', 1024)
for step = 1, 1000 do
  if step == at_step and ds.rank() == victim then fail(mode) end
  ds.comm.all_reduce(t)
end
