-- Reference losses for a token file: the validation cross-entropy (nats/token) of k-gram
-- count models fitted on the training file, k = 0..6 (add-0.01 smoothing). A GPT whose
-- validation loss is below the best of these has learned more than local statistics.
--   dsrun run examples/gpt/corpus_stats.lua [train.tok] [val.tok]
-- (reads the token file format of docs/data.md directly, as any tool could)
local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local train_path = arg[1] or here .. '/data/train.tok'
local val_path = arg[2] or here .. '/data/val.tok'

local function load(path)
  local f = assert(io.open(path, 'rb'))
  local b = f:read('a')
  f:close()
  local magic, version, width, count, vocab = string.unpack('<c8 I4 I4 I8 I4', b)
  assert(magic == 'DSTOKENS' and version == 1, path .. ': not a version 1 token file')
  local fmt, toks = width == 2 and '<I2' or '<I4', {}
  for i = 0, count - 1 do toks[i + 1] = string.unpack(fmt, b, 33 + i * width) end
  return toks, vocab
end

local train, vocab = load(train_path)
local val = load(val_path)
local V, alpha = vocab > 0 and vocab or 65536, 0.01
print(string.format('uniform over %d tokens: %.3f nats/token', V, math.log(V)))
for k = 0, 6 do
  local ctx, joint = {}, {}
  local function key(t, i, n) return table.concat(t, ',', i - n, i) end
  for i = k + 1, #train do
    local c = k > 0 and key(train, i - 1, k - 1) or ''
    ctx[c] = (ctx[c] or 0) + 1
    local j = c .. '|' .. train[i]
    joint[j] = (joint[j] or 0) + 1
  end
  local nll = 0
  for i = k + 1, #val do
    local c = k > 0 and key(val, i - 1, k - 1) or ''
    nll = nll - math.log(((joint[c .. '|' .. val[i]] or 0) + alpha) / ((ctx[c] or 0) + alpha * V))
  end
  print(string.format('%d-token context: %.3f nats/token', k, nll / (#val - k)))
end
