-- expect: token id 40 at position 3 is outside the vocabulary 0..31
local ds = require 'ds'
local gpt = require 'ds.gpt'
local m = gpt.GPT({vocab = 32, context = 8, layers = 1, heads = 2, d = 16})
local x, y = ds.tensor('int32', 1, 8), ds.tensor('int32', 1, 8)
x:set(4, 40)
local loss = m:forward(x, y) -- error here
