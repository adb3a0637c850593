-- Makes the example's training data: the synthetic corpus of corpus.lua as token files.
--   dsrun run examples/gpt/make_data.lua [dir=examples/gpt/data] [seed=1] [kb=400]
-- writes DIR/train.tok (about KB kilobytes of text) and DIR/val.tok (a tenth of it, from
-- seed + 1), and prints a sample. `dsrun tokenize --decode DIR/train.tok` shows the text.
local here = arg[0]:match('^(.*)/[^/]*$') or '.'
package.path = here .. '/?.lua;' .. package.path
local ds = require 'ds'
local corpus = require 'corpus'

local opts = {dir = here .. '/data', seed = 1, kb = 400}
for _, a in ipairs(arg) do
  local k, v = a:match('^(%w+)=(.*)$')
  if not k or opts[k] == nil then
    error(string.format("argument '%s': expected dir=PATH, seed=N or kb=N", a), 0)
  end
  opts[k] = k == 'dir' and v or (math.tointeger(tonumber(v)) or error(k .. ' must be an integer', 0))
end

local t0 = os.clock()
local train, val = corpus.ensure{dir = opts.dir, seed = opts.seed, force = true,
                                 train_bytes = opts.kb * 1000, val_bytes = opts.kb * 100}
local secs = os.clock() - t0
for _, path in ipairs{train, val} do
  local d = ds.data.open{path = path, context = 1, batch = 1, rank = 0, world_size = 1}
  print(string.format('%s: %d tokens', path, d:ntokens()))
  d:close()
end
print(string.format('made in %.2f s; a sample:', secs))
local d = ds.data.open{path = train, context = 160, batch = 1, seed = opts.seed, rank = 0, world_size = 1}
print(ds.data.decode((d:batch(0)), '\n<|endoftext|>\n'))
