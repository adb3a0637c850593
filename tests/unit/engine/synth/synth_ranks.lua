-- ds.synth.progressions as one rank of a data-parallel run (synth_ranks.sh starts every
-- rank of worlds 1-3 as `dsrun worker`): with rank and world size from the context, this
-- rank's rows are exactly rows [rank*B, (rank+1)*B) of the world-of-one batch of
-- B*world rows for the same (seed, step, micro), as the token-file loader shards.
local ds = require 'ds'
local synth = require 'ds.synth'

local rank, world = ds.rank(), ds.world_size()
local B, T, V = 3, 5, 37

local function fails(want, f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, 'expected an error containing: ' .. want)
  assert(tostring(err):find(want, 1, true), 'expected "' .. want .. '", got: ' .. tostring(err))
end

local mine = synth.progressions {vocab = V, context = T, batch = B, seed = 9}
assert(mine.rank == rank and mine.world_size == world and mine.global_batch == B * world, 'facts')
local one = synth.progressions {vocab = V, context = T, batch = B * world, seed = 9, rank = 0, world_size = 1}
local explicit = synth.progressions {vocab = V, context = T, batch = B, seed = 9, rank = rank, world_size = world}
local rows_seen = {}
for step = 0, 3 do
  for micro = 0, 2 do
    local x, y = mine:batch(step, micro)
    local gx, gy = one:batch(step, micro)
    local ex, ey = explicit:batch(step, micro)
    for i = 1, B * T do
      local g = rank * B * T + i
      if x:get(i) ~= gx:get(g) or y:get(i) ~= gy:get(g) then
        error(string.format('rank %d of %d, step %d, micro %d: element %d is %d/%d, the global batch\'s %d is %d/%d',
          rank, world, step, micro, i, x:get(i), y:get(i), g, gx:get(g), gy:get(g)))
      end
      assert(ex:get(i) == x:get(i) and ey:get(i) == y:get(i), 'explicit rank and world differ from the context')
    end
    -- the targets are the inputs shifted by one within each row
    for b = 0, B - 1 do
      for t = 1, T - 1 do assert(y:get(b * T + t) == x:get(b * T + t + 1), 'y is x shifted') end
    end
    rows_seen[#rows_seen + 1] = x:get(1)
  end
end
-- the rows depend on (step, micro): not one batch repeated
local distinct = {}
for _, v in ipairs(rows_seen) do distinct[v] = true end
assert(next(distinct, next(distinct)) ~= nil, 'every batch starts alike')

fails('rank 2 outside the world of 2', synth.progressions, {vocab = V, context = T, batch = B, rank = 2, world_size = 2})
fails("'world_size' = 0 must be >= 1", synth.progressions, {vocab = V, context = T, batch = B, world_size = 0})
fails("'rank' = -1 must be >= 0", synth.progressions, {vocab = V, context = T, batch = B, rank = -1})
fails("unknown option 'ranks'", synth.progressions, {vocab = V, context = T, batch = B, ranks = 1})
print(string.format('rank %d of %d: ok', rank, world))
