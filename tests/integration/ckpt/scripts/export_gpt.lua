-- export_gpt.lua DIR: saves a tiny GPT with model:save, giving meta.json an export table
-- built from gpt.lua's naming rules, and writes gpt.save_safetensors' file beside it as
-- the reference that `dsrun ckpt export` must reproduce byte for byte. Then loads the
-- checkpoint into a differently initialised model and checks every parameter.
local ds = require 'ds'
local gpt = require 'ds.gpt'
local dir = arg[1]
local cfg = gpt.config {vocab = 64, context = 32, layers = 2, heads = 4, d = 64}
local m = gpt.GPT(cfg, {seed = 1})
local tensors = {}
for _, s in ipairs(m.stages) do
  for _, p in ipairs(s:param_table()) do
    tensors[#tensors + 1] = {name = gpt.hf_name(p.name), array = s:info().name .. '/params',
                             offset = p.offset, shape = p.shape, transpose = gpt.is_conv1d(p.name)}
  end
end
m:save(dir, nil, {step = 1, export = {metadata = {format = 'pt'}, tensors = tensors}})
gpt.save_safetensors(m, dir .. '/reference.safetensors')
local m2 = gpt.GPT(cfg, {seed = 2})
m2:load(dir)
for _, p in ipairs(m:parameters()) do
  local a, b = m:param(p.name):to_table(), m2:param(p.name):to_table()
  for i = 1, #a do
    if a[i] ~= b[i] then error(string.format('%s[%d] differs after load', p.name, i)) end
  end
end
print(string.format('saved, loaded and wrote the reference (%d tensors)', #tensors))
