-- A synthetic training corpus, made here from a seed: nothing downloaded, no outside text.
-- Documents (separated by blank lines) of three kinds, each with structure a small GPT
-- learns step by step (docs/data.md, "Example data"):
--   stories     sentences from a small grammar: "The old fox follows a red bird near the river."
--               with agreement a/an, capitals and full stops;
--   sums        "37 + 45 = 82" and "7 * 8 = 56": the answer is a function of the question;
--   counting    "count from 17: 17 18 19 20 21 22 23 24": after the first number, all of it.
--
--   local corpus = require 'corpus'          -- with examples/gpt on package.path
--   local text = corpus.generate{seed = 1, bytes = 400000}
--   local train, val = corpus.ensure{dir = 'examples/gpt/data'}   -- token files
local M = {}

-- splitmix64 on Lua's wrapping 64-bit integers: the same text on every platform.
local function rng(seed)
  local s = seed
  return function(n) -- an integer in [0, n)
    s = s + 0x9e3779b97f4a7c15
    local z = s
    z = (z ~ (z >> 30)) * 0xbf58476d1ce4e5b9
    z = (z ~ (z >> 27)) * 0x94d049bb133111eb
    z = z ~ (z >> 31)
    return (z >> 11) % n
  end
end

local DET = {'the', 'a', 'every', 'my', 'your', 'one'}
local ADJ = {'small', 'big', 'red', 'old', 'young', 'quiet', 'green', 'angry', 'happy', 'orange',
             'brave', 'early'}
local NOUN = {'cat', 'dog', 'bird', 'child', 'teacher', 'robot', 'farmer', 'king', 'queen',
              'fox', 'owl', 'elephant', 'apple', 'engine'}
local VT = {'sees', 'likes', 'follows', 'finds', 'helps', 'watches', 'chases', 'paints', 'calls'}
local VI = {'sleeps', 'runs', 'sings', 'waits', 'laughs', 'dances'}
local PREP = {'near', 'under', 'behind', 'with', 'beside'}
local PLACE = {'the river', 'the house', 'the old tree', 'the market', 'the hill', 'the gate'}

local function pick(r, list) return list[r(#list) + 1] end

local function noun_phrase(r)
  local det = pick(r, DET)
  local adj = r(2) == 0 and pick(r, ADJ) or nil
  local noun = pick(r, NOUN)
  if det == 'a' and (adj or noun):match('^[aeiou]') then det = 'an' end -- a learnable rule
  return det .. ' ' .. (adj and adj .. ' ' or '') .. noun
end

local function sentence(r)
  local s
  if r(3) > 0 then
    s = noun_phrase(r) .. ' ' .. pick(r, VT) .. ' ' .. noun_phrase(r)
  else
    s = noun_phrase(r) .. ' ' .. pick(r, VI)
  end
  if r(3) == 0 then s = s .. ' ' .. pick(r, PREP) .. ' ' .. pick(r, PLACE) end
  return s:sub(1, 1):upper() .. s:sub(2) .. '.'
end

local function story(r, out)
  for _ = 1, 2 + r(5) do out[#out + 1] = sentence(r) .. '\n' end
end

local function sums(r, out)
  for _ = 1, 3 + r(6) do
    if r(2) == 0 then
      local a, b = r(100), r(100)
      out[#out + 1] = string.format('%d + %d = %d\n', a, b, a + b)
    else
      local a, b = r(10), r(10)
      out[#out + 1] = string.format('%d * %d = %d\n', a, b, a * b)
    end
  end
end

local function counting(r, out)
  local from, n = r(90), 5 + r(8)
  local nums = {}
  for i = 0, n - 1 do nums[#nums + 1] = tostring(from + i) end
  out[#out + 1] = 'count from ' .. from .. ': ' .. table.concat(nums, ' ') .. '\n'
end

-- The corpus text: documents until at least `bytes` bytes, separated by blank lines.
function M.generate(opts)
  opts = opts or {}
  local r = rng(math.tointeger(opts.seed or 1) or error('corpus: seed must be an integer'))
  local want = opts.bytes or 400000
  local out, size = {}, 0
  while size < want do
    local k, first = r(10), #out + 1
    if k < 5 then story(r, out) elseif k < 8 then sums(r, out) else counting(r, out) end
    out[#out + 1] = '\n'
    for i = first, #out do size = size + #out[i] end
  end
  return table.concat(out)
end

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

-- Token files train.tok and val.tok in opts.dir (made if missing, or always with
-- force = true), from seeds opts.seed and opts.seed + 1. Returns their paths.
function M.ensure(opts)
  local ds = require 'ds'
  local dir = opts.dir or error('corpus.ensure: dir is required')
  local seed = opts.seed or 1
  local train, val = dir .. '/train.tok', dir .. '/val.tok'
  if opts.force or not exists(train) or not exists(val) then
    assert(os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'"), 'cannot create ' .. dir)
    ds.data.write_text(train, M.generate{seed = seed, bytes = opts.train_bytes or 400000},
                       {docs = 'blank'})
    ds.data.write_text(val, M.generate{seed = seed + 1, bytes = opts.val_bytes or 40000},
                       {docs = 'blank'})
  end
  return train, val
end

return M
