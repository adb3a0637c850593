-- A script that cannot be loaded: a user error, which no restart would fix.
local x = = 1
