-- ZeRO-3 parameters outside a step: reading a released stage's parameters is an error
-- naming the stage; model:with_params gathers them; safetensors export and import go
-- through it (a model saved and loaded into another, differently seeded, is equal).
--   dsrun run zero3_params.lua DIR
local ds = require 'ds'
local gpt = require 'ds.gpt'
local dir = assert(arg[1], 'usage: zero3_params.lua DIR')
local cfg = {vocab = 64, context = 16, layers = 2, heads = 4, d = 32}
local function make(seed) return gpt.GPT(cfg, {seed = seed, embed = {zero = 3}, blocks = {zero = 3}, head = {zero = 1}}) end
local a, b = make(7), make(99)
local ok, err = pcall(function() return a.stages[2]:params() end)
assert(not ok and err:match("stage 'blocks' %(ZeRO%-3%) holds only this rank's shard"), tostring(err))
assert(a.stages[3]:params():numel() > 0, 'a ZeRO-1 stage keeps its parameters whole')
local path = string.format('%s/zero3-%d.safetensors', dir, ds.rank())
gpt.save_safetensors(a, path)
gpt.load_safetensors(b, path)
a:with_params(function() b:with_params(function()
  for k, s in ipairs(a.stages) do
    local x, y = s:params():to_table(), b.stages[k]:params():to_table()
    for i = 1, #x do assert(x[i] == y[i], string.format('stage %d element %d: %g ~= %g', k, i, x[i], y[i])) end
  end
end) end)
os.remove(path)
print('zero3 params ok')
