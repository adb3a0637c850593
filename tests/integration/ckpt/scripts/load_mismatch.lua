-- model:load refuses a checkpoint of another model's size (here: width 16 saved, width
-- 32 loading) with a message naming meta.json and both sizes, instead of loading the
-- leading part of each array. Exits non-zero when the load is wrongly accepted.
local ds = require 'ds'
local gpt = require 'ds.gpt'
local function model(d)
  return gpt.GPT(gpt.config {vocab = 32, context = 8, layers = 1, heads = 2, d = d}, {seed = 1})
end
local dir = assert(arg[1], 'usage: load_mismatch.lua DIR')
local small = model(16)
small:save(dir, ds.optim.AdamW {small, lr = 1e-3}, {step = 1})
local big = model(32)
local ok, err = pcall(function() big:load(dir, ds.optim.AdamW {big, lr = 1e-3}) end)
assert(not ok, 'a checkpoint of a smaller model was loaded')
assert(tostring(err):find("meta.json: array 'embed/params' is fp32 x %d+, this run expects fp32 x %d+"),
       'unexpected message: ' .. tostring(err))
print('refused: ' .. tostring(err))
