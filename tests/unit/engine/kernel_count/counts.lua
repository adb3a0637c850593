-- Prints what two training steps of a tiny GPT ask of the device, one line per kernel-table
-- entry and memory op (ds.kernel_counts), for same_on_devices.sh to compare between cpu and
-- sim. Host<->device copies are left out: the engine skips its staging copies on cpu,
-- whose memory is the host's. Every precision and checkpointing a GPT stage takes.
local ds = require 'ds'
local gpt = require 'ds.gpt'

local cfg = {vocab = 64, context = 16, layers = 2, heads = 4, d = 32, dropout = 0}
local function one(precision, checkpoint)
  local m = gpt.GPT(cfg, {seed = 1, embed = {precision = precision},
                          blocks = {checkpoint = checkpoint, precision = precision},
                          head = {precision = precision}})
  local opt = ds.optim.AdamW {m, lr = 3e-4, weight_decay = 0.1}
  local x, y = ds.tensor('int32', 2, cfg.context), ds.tensor('int32', 2, cfg.context)
  for i = 1, 2 * cfg.context do x:set(i, (i * 7) % cfg.vocab); y:set(i, (i * 11) % cfg.vocab) end
  local steps = {}
  for step = 1, 2 do
    ds.kernel_counts(true)
    m:train_step {step = step, accum = 1, optimizer = opt, clip = 1.0, lr = 3e-4,
                  next_batch = function() return x, y end}
    steps[step] = ds.kernel_counts()
  end
  ds.kernel_counts(false)
  assert(ds.kernel_counts()['matmul' .. (precision == 'fp32' and '' or '16') .. '_forward'],
         'no GEMM counted')
  local names = {}
  for name in pairs(steps[2]) do
    if name ~= 'to_host' and name ~= 'from_host' then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do
    local c = steps[2][name]
    local costs = {}
    for _, k in ipairs(c.costs) do costs[#costs + 1] = k.calls .. '/' .. k.flops .. '/' .. k.bytes_read .. '/' .. k.bytes_written end
    print(string.format('%s %s %s calls=%d flops=%d read=%d written=%d costs=%s', precision,
      checkpoint, name, c.calls, c.flops, c.bytes_read, c.bytes_written, table.concat(costs, ',')))
  end
end
for _, p in ipairs {'fp32', 'bf16', 'fp16'} do
  for _, ck in ipairs {'none', 'full'} do one(p, ck) end
end
print('counted')
