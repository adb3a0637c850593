-- expect: checkpoint must be 'none', 'full', N >= 1, 'every:N' or {every = N}, got sometimes
local gpt = require 'ds.gpt'
local cfg = {vocab = 32, context = 8, layers = 2, heads = 2, d = 16}
local m = gpt.GPT(cfg, {blocks = {checkpoint = 'sometimes'}}) -- error here
