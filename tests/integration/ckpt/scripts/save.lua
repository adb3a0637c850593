-- save.lua DIR STEP: every rank saves its ZeRO share of two arrays whose element i is
-- i + STEP (params) and 2i + STEP (moments); ds.barrier is the save's barrier.
local ds = require 'ds'
local dir, step = arg[1], math.tointeger(tonumber(arg[2]))
local rank, world = ds.rank(), ds.world_size()
local N = 300007

local function share(n, w, r)
  local s = (n + w - 1) // w
  local b = math.min(r * s, n)
  return b, math.min(b + s, n)
end

local b, e = share(N, world, rank)
local w = ds.ckpt_writer(dir, step, rank, world)
for _, a in ipairs {{'model/params', 1}, {'model/adam_m', 2}} do
  if e > b then
    local t = ds.tensor('fp32', e - b)
    local v = {}
    for i = 1, e - b do v[i] = a[2] * (b + i - 1) + step end
    t:from_table(v)
    assert(w:add(a[1], t, N, b))
  end
end
local ok, err = w:commit({step = step, world = world, data = {offset = step * 1000}},
                         function() ds.barrier() end)
if not ok then error(err) end
print(string.format('rank %d saved step %d', rank, step))
