-- A GPT whose parameters alone need more memory than the device has (sim: its
-- DS_SIM_MEMORY; a GPU: a 200 GB model): the rank must fail with the bytes asked, the
-- bytes free and what it holds per category, not crash.
local ds = require 'ds'
local gpt = require 'ds.gpt'
local big = arg[1] == 'big'
local cfg = big and {vocab = 50257, context = 64, layers = 64, heads = 16, d = 8192, dropout = 0}
               or {vocab = 1024, context = 64, layers = 8, heads = 8, d = 512, dropout = 0}
gpt.GPT(cfg, {seed = 1})
print('the model fit: ' .. ds.memory_report())
