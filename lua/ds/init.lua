-- The ds library: what a rank's script sees with `local ds = require 'ds'`.
-- The C core (runtime) is ds._core; this file wraps it in the torch7-nn idiom.
local core = require 'ds._core'

local ds = {}
for k, v in pairs(core) do ds[k] = v end
ds._core = core

return ds
