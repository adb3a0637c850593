-- ds.data and ds.safetensors from Lua. Run by test_data_lua.c with `ds` = ds._core, in a
-- world of rank 1 of 2; arg 1 is a scratch directory. Returns the number of checks run.
local dir = ...
local checks = 0

local function check(cond, msg)
  checks = checks + 1
  if not cond then error(msg or 'check failed', 2) end
end

-- Runs f, which must fail with a message containing `want` (plain text).
local function fails(want, f, ...)
  local ok, err = pcall(f, ...)
  checks = checks + 1
  if ok then error('expected an error containing "' .. want .. '"', 2) end
  if not tostring(err):find(want, 1, true) then
    error('expected an error containing "' .. want .. '", got: ' .. tostring(err), 2)
  end
end

local function write(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

-- Tokenize a small text: documents split at blank lines, multi-byte UTF-8 kept as bytes.
local text = 'caf\xc3\xa9 one\n\nline two\nline three\n'
write(dir .. '/a.txt', text)
local n = ds.data.tokenize(dir .. '/a.txt', dir .. '/a.tok', {docs = 'blank'})
check(n == #text - 1 + 2, 'token count ' .. n)
write(dir .. '/bad.txt', 'ok\xff')
fails('invalid UTF-8 at byte offset 2', ds.data.tokenize, dir .. '/bad.txt', dir .. '/bad.tok')
check(ds.data.tokenize(dir .. '/bad.txt', dir .. '/bad.tok', {bytes = true}) == 4)
fails("unknown option 'doc'", ds.data.tokenize, dir .. '/a.txt', dir .. '/b.tok', {doc = 'blank'})
fails("expected 'file', 'blank' or 'none'", ds.data.tokenize, dir .. '/a.txt', dir .. '/b.tok', {docs = 'x'})
check(ds.data.tokenize({dir .. '/a.txt', dir .. '/a.txt'}, dir .. '/two.tok') == 2 * (#text + 1))

-- write_text: a Lua string straight to a token file, same modes as tokenize.
check(ds.data.write_text(dir .. '/s.tok', 'a\n\nb\n', {docs = 'blank'}) == 6)
local s = ds.data.open{path = dir .. '/s.tok', context = 5, batch = 1, rank = 0, world_size = 1}
check(ds.data.decode((s:batch(0))) == 'a\n<|endoftext|>b\n') -- the only window
s:close()
fails('invalid UTF-8 at byte offset 1', ds.data.write_text, dir .. '/s.tok', 'a\xff')
check(ds.data.write_text(dir .. '/s.tok', 'a\xff', {bytes = true, docs = 'none'}) == 2)

-- encode / decode
local e = ds.data.encode('h\xc3\xa9')
check(e:numel() == 3 and e:dtype() == 'int32')
local t = e:to_table()
check(t[1] == 104 and t[2] == 0xc3 and t[3] == 0xa9)
check(ds.data.decode(e) == 'h\xc3\xa9')
check(ds.data.decode({65, ds.data.EOT, 66}) == 'A<|endoftext|>B')
check(ds.data.decode({65, 256}, '\n') == 'A\n')
fails('outside the byte-level vocabulary', ds.data.decode, {65, 257})
fails('not an integer', ds.data.decode, {65, 'x'})
check(ds.data.VOCAB == 257)

-- write_tokens + loader. Tokens i % 200, so a window shows where it starts.
local toks = {}
for i = 0, 999 do toks[#toks + 1] = i % 200 end
check(ds.data.write_tokens(dir .. '/c.tok', toks, {vocab = 200}) == 1000)
fails('out of range', ds.data.write_tokens, dir .. '/d.tok', {5, 300}, {vocab = 257})

-- Rank and world come from the context (rank 1 of 2) unless given.
local d = ds.data.open{path = dir .. '/c.tok', context = 8, batch = 3, seed = 5}
check(d:rank() == 1 and d:world_size() == 2 and d:global_batch() == 6)
check(d:ntokens() == 1000 and d:vocab() == 200 and d:context() == 8 and d:batch_size() == 3)
local x, y = d:batch(4, 1)
local xs, ys = x:shape(), y:shape()
check(xs[1] == 3 and xs[2] == 8 and ys[1] == 3 and ys[2] == 8)
local xt, yt = x:to_table(), y:to_table()
for b = 0, 2 do
  local s = d:window_start(4, 1, 3 + b) -- rank 1 holds windows 3..5 of the global batch
  for i = 1, 8 do
    check(xt[b * 8 + i] == (s + i - 1) % 200)
    check(yt[b * 8 + i] == (s + i) % 200)
  end
end

-- World-size invariance seen from Lua: world 1 with batch 6 == ranks 0,1 of world 2.
local function rows(loader, step, micro)
  local a = loader:batch(step, micro):to_table()
  return table.concat(a, ',')
end
local w1 = ds.data.open{path = dir .. '/c.tok', context = 8, batch = 6, seed = 5, rank = 0, world_size = 1}
local r0 = ds.data.open{path = dir .. '/c.tok', context = 8, batch = 3, seed = 5, rank = 0}
check(rows(w1, 4, 1) == rows(r0, 4, 1) .. ',' .. rows(d, 4, 1))
check(rows(w1, 4, 1) ~= rows(w1, 5, 1))
w1:close()
fails('closed', w1.ntokens, w1)
local tbc <close> = ds.data.open{path = dir .. '/c.tok', context = 8, batch = 1}

fails("unknown option 'contxt'", ds.data.open, {path = dir .. '/c.tok', contxt = 8, batch = 1})
fails("option 'path' (a string) is required", ds.data.open, {context = 8, batch = 1})
fails("option 'context' (an integer >= 1) is required", ds.data.open, {path = dir .. '/c.tok', batch = 1})
fails("option 'batch' must be an integer", ds.data.open, {path = dir .. '/c.tok', context = 8, batch = 'x'})
fails("option 'vocab' is 4294967296 (0..2147483647 expected)", ds.data.open,
      {path = dir .. '/c.tok', context = 8, batch = 1, vocab = 1 << 32})
fails('rank 2 outside the world of 2', ds.data.open, {path = dir .. '/c.tok', context = 8, batch = 1, rank = 2})
fails('too few for one window', ds.data.open, {path = dir .. '/c.tok', context = 1000, batch = 1})
fails("vocab 200 is larger than the model's 100", ds.data.open, {path = dir .. '/c.tok', context = 8, batch = 1, vocab = 100})
fails('c.tokx: cannot open token file', ds.data.open, {path = dir .. '/c.tokx', context = 8, batch = 1})
fails('step -1', d.batch, d, -1, 0)

-- safetensors: save and load, with metadata; names as Hugging Face GPT-2 spells them.
local w = ds.tensor('fp32', {2, 3})
w:from_table({1, 2, 3, 4, 5, 6.5})
local ids = ds.data.encode('xyz')
local path = dir .. '/m.safetensors'
ds.safetensors.save(path, {['transformer.h.0.attn.c_attn.weight'] = w, ids = ids},
                    {format = 'pt', step = 12})
local back, meta = ds.safetensors.load(path)
check(meta.format == 'pt' and meta.step == '12')
local wb = back['transformer.h.0.attn.c_attn.weight']
check(wb:dtype() == 'fp32' and wb:shape()[1] == 2 and wb:shape()[2] == 3)
check(table.concat(wb:to_table(), ',') == table.concat(w:to_table(), ','))
check(ds.data.decode(back.ids) == 'xyz')
local info = ds.safetensors.info(path)
check(info.ids.dtype == 'I32' and info.ids.shape[1] == 3 and info.ids.nbytes == 12)
check(info['transformer.h.0.attn.c_attn.weight'].offset == 0)
ds.safetensors.save(dir .. '/empty.safetensors', {})
check(next((ds.safetensors.load(dir .. '/empty.safetensors'))) == nil)

fails('must be strings', ds.safetensors.save, path, {[1] = w})
fails('ds.Tensor expected', ds.safetensors.save, path, {a = 5})
fails("metadata 'k' must be a string", ds.safetensors.save, path, {a = w}, {k = {}})
write(dir .. '/bad.safetensors', '\16\0\0\0\0\0\0\0{"a":{"dtype":"F32"')
fails('bad.safetensors: not a valid safetensors file', ds.safetensors.load, dir .. '/bad.safetensors')
fails('cannot open', ds.safetensors.load, dir .. '/none.safetensors')
local json = '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}'
write(dir .. '/u8.safetensors', string.pack('<I8', 64) .. json .. string.rep(' ', 64 - #json) .. 'xy')
check(ds.safetensors.info(dir .. '/u8.safetensors').a.dtype == 'U8')
fails("tensor 'a' has dtype U8", ds.safetensors.load, dir .. '/u8.safetensors')

return checks
