-- What `dsrun ckpt export` writes from a checkpoint (docs/checkpoints.md): model:save
-- records this table in meta.json unless the state gives its own `export`. Every
-- parameter, read from its stage's "params" array (the fp32 masters) and written in the
-- stage's precision (a 16-bit stage's working copy is its masters rounded to nearest
-- even), so the file holds what the model computes with. A model may name and lay out
-- its tensors for its ecosystem with model.export = {name = fn, transpose = fn,
-- metadata = {...}} (gpt.GPT: Hugging Face GPT-2's); name returning nil leaves a
-- parameter out.
local M = {}

function M.table(m)
  local hooks = m.export or {}
  local tensors = {}
  for _, s in ipairs(m.stages) do
    local info = s:info()
    for _, p in ipairs(s:param_table()) do
      local name = p.name
      if hooks.name then name = hooks.name(p.name) end
      if name then
        tensors[#tensors + 1] = {name = name, array = info.name .. '/params', offset = p.offset,
                                 shape = p.shape, transpose = hooks.transpose and hooks.transpose(p.name) or false,
                                 dtype = info.precision}
      end
    end
  end
  return {metadata = hooks.metadata or {format = 'pt'}, tensors = tensors}
end

return M
