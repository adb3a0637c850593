-- expect: ds.Stage: unknown option 'zer0'
local ds = require 'ds'
local s = ds.Stage {ds.nn.GELU {}, zer0 = 1} -- error here
