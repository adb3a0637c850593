-- check.lua DIR STEP WORLD: reads the checkpoint DIR (its latest) as WORLD ranks would,
-- one view after another, and checks every element and the saved state.
local ds = require 'ds'
local dir, step, world = arg[1], math.tointeger(tonumber(arg[2])), math.tointeger(tonumber(arg[3]))
local N = 300007
local ck = assert(ds.ckpt_open(dir))
assert(ck:step() == step, string.format('latest is step %d, expected %d', ck:step(), step))
assert(ck:state().data.offset == step * 1000)
for _, a in ipairs {{'model/params', 1}, {'model/adam_m', 2}} do
  assert(ck:expect(a[1], 'fp32', N))
  local s = (N + world - 1) // world
  for r = 0, world - 1 do
    local b, e = math.min(r * s, N), math.min((r + 1) * s, N)
    if e > b then
      local t = ds.tensor('fp32', e - b)
      assert(ck:read(a[1], b, t))
      local v = t:to_table()
      for i = 1, e - b do
        if v[i] ~= a[2] * (b + i - 1) + step then
          error(string.format('%s[%d] = %s, expected %s', a[1], b + i - 1, v[i], a[2] * (b + i - 1) + step))
        end
      end
    end
  end
end
print(string.format('step %d (saved by %d ranks) reads back at %d ranks', step, ck:world(), world))
