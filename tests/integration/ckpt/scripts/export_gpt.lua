-- export_gpt.lua DIR: saves a tiny GPT with bf16 blocks (fp32 embedding and head) with
-- model:save, which records what `dsrun ckpt export` is to write (no table by hand), and
-- writes gpt.save_safetensors' file beside it as the reference that the export must
-- reproduce byte for byte: bf16 tensors for the bf16 stage, fp32 for the others. Then
-- loads the checkpoint into a differently initialised model and checks every parameter.
local ds = require 'ds'
local gpt = require 'ds.gpt'
local dir = arg[1]
local cfg = gpt.config {vocab = 64, context = 32, layers = 2, heads = 4, d = 64}
local staging = {blocks = {precision = 'bf16'}}
local m = gpt.GPT(cfg, {seed = 1, blocks = staging.blocks})
m:save(dir, nil, {step = 1})
gpt.save_safetensors(m, dir .. '/reference.safetensors')
local m2 = gpt.GPT(cfg, {seed = 2, blocks = staging.blocks})
m2:load(dir)
local n = 0
for _, p in ipairs(m:parameters()) do
  local a, b = m:param(p.name):to_table(), m2:param(p.name):to_table()
  for i = 1, #a do
    if a[i] ~= b[i] then error(string.format('%s[%d] differs after load', p.name, i)) end
  end
  n = n + 1
end
print(string.format('saved, loaded and wrote the reference (%d tensors)', n))
