-- expect: input's last dimension is 5, expected 4
local ds = require 'ds'
local s = ds.Stage {ds.nn.Linear {['in'] = 4, out = 8}}
local x = ds.tensor('fp32', 2, 5)
local y = s:forward(x) -- error here
