-- GPT-2, written from the ds.nn layers: learned position embeddings, pre-LayerNorm
-- blocks (eps 1e-5), tanh-GELU MLP 4x wide, biases everywhere, a final LayerNorm and the
-- output head tied to the token embedding. Init normal(0, 0.02), the residual
-- projections (attn.c_proj, mlp.c_proj) normal(0, 0.02/sqrt(2 * layers)).
-- Parameter names are Hugging Face's without the "transformer." prefix.
local util = require 'ds.util'
local nn = require 'ds.nn'
local model = require 'ds.model'

local gpt = {}

local CFG_KEYS = util.set {'vocab', 'context', 'layers', 'heads', 'd', 'dropout', 'eps'}

-- Defaults: GPT-2 small (124M).
function gpt.config(t)
  t = t or {}
  util.check_keys(t, CFG_KEYS, 'gpt.config')
  local w = 'gpt.config'
  local c = {
    vocab = util.int(t, 'vocab', w, 50257, 1),
    context = util.int(t, 'context', w, 1024, 1),
    layers = util.int(t, 'layers', w, 12, 1),
    heads = util.int(t, 'heads', w, 12, 1),
    d = util.int(t, 'd', w, 768, 1),
    dropout = util.num(t, 'dropout', w, 0.0, 0, 1),
    eps = util.num(t, 'eps', w, 1e-5, 0),
  }
  if c.d % c.heads ~= 0 then util.errorf('gpt.config: d = %d is not divisible by heads = %d', c.d, c.heads) end
  if c.dropout >= 1 then util.error('gpt.config: dropout must be < 1') end
  return c
end

-- The layers in order: {embed = {...}, blocks = {...}, head = {...}}.
function gpt.layers(cfg)
  local std, proj_std = 0.02, 0.02 / math.sqrt(2 * cfg.layers)
  local wte = nn.Embedding {name = 'wte', vocab = cfg.vocab, d = cfg.d, std = std}
  local L = {embed = {wte, nn.PositionEmbedding {name = 'wpe', context = cfg.context, d = cfg.d, std = std},
                      nn.Dropout {name = 'drop', p = cfg.dropout}},
             blocks = {}}
  for i = 0, cfg.layers - 1 do
    L.blocks[#L.blocks + 1] = nn.TransformerBlock {name = 'h.' .. i, d = cfg.d, heads = cfg.heads,
      dropout = cfg.dropout, eps = cfg.eps, std = std, proj_std = proj_std}
  end
  L.head = {nn.LayerNorm {name = 'ln_f', d = cfg.d, eps = cfg.eps},
            nn.Linear {name = 'lm_head', ['in'] = cfg.d, out = cfg.vocab, bias = false, tie = wte}}
  return L
end

local STAGING_KEYS = util.set {'seed', 'embed', 'blocks', 'head', 'zero_bucket', 'zero_prefetch', 'loss_scaler'}

local function stage_of(layers, opts, name, seed)
  opts = opts or {}
  model.check_stage_opts(opts, 'gpt.GPT ' .. name .. ' stage')
  model.note_stage_opts(opts, 'gpt.GPT ' .. name .. ' stage')
  local spec = {name = opts.name or name, zero = opts.zero, checkpoint = opts.checkpoint,
                precision = opts.precision, seed = opts.seed or seed}
  -- The job's checkpointing is for the blocks: the embedding's activations are small, and
  -- the head's output (the logits) is kept for the loss anyway, so checkpointing either
  -- saves next to nothing (a span ending in lm_head or an embedding keeps that layer's
  -- output without running it again; ln_f or the dropout would be recomputed). Their
  -- staging may still choose it.
  if name == 'embed' or name == 'head' then spec.checkpoint = opts.checkpoint or 'none' end
  for i, l in ipairs(layers) do spec[i] = l end
  return model.stage_of(spec)
end

-- gpt.GPT(cfg, staging) -> ds.Model. staging (all optional):
--   seed   = init seed (default 1234; values depend only on seed and parameter names)
--   embed  = stage options for wte, wpe, drop
--   blocks = stage options for all blocks in one stage, or a list of
--            {layers = n, <stage options>} splitting the blocks over several stages
--   head   = stage options for ln_f and the tied head
--   zero_bucket, zero_prefetch = ds.Model's ZeRO options (docs/zero.md)
--   loss_scaler = ds.Model's loss-scaler options (fp16; docs/precision.md)
function gpt.GPT(cfg, staging)
  cfg = gpt.config(cfg)
  staging = staging or {}
  util.check_keys(staging, STAGING_KEYS, 'gpt.GPT staging')
  local seed = staging.seed or model.defaults().seed
  local L = gpt.layers(cfg)
  local stages = {stage_of(L.embed, staging.embed, 'embed', seed)}
  local groups = staging.blocks or {}
  if #groups == 0 then -- one stage: the options apply to all blocks
    local g = {layers = cfg.layers}
    for k, v in pairs(groups) do g[k] = v end
    groups = {g}
  end
  local first, total = 1, 0
  for gi, g in ipairs(groups) do
    local n = util.int(g, 'layers', 'gpt.GPT blocks[' .. gi .. ']', nil, 1)
    total = total + n
    if total > cfg.layers then util.errorf('gpt.GPT: blocks stages hold %d layers, the model has %d', total, cfg.layers) end
    local opts = {}
    for k, v in pairs(g) do if k ~= 'layers' then opts[k] = v end end
    local layers = table.move(L.blocks, first, first + n - 1, 1, {})
    stages[#stages + 1] = stage_of(layers, opts, #groups == 1 and 'blocks' or ('blocks' .. gi), seed)
    first = first + n
  end
  if total ~= cfg.layers then util.errorf('gpt.GPT: blocks stages hold %d layers, the model has %d', total, cfg.layers) end
  stages[#stages + 1] = stage_of(L.head, staging.head, 'head', seed)
  stages.criterion = nn.CrossEntropy()
  stages.zero_bucket, stages.zero_prefetch = staging.zero_bucket, staging.zero_prefetch
  stages.loss_scaler = staging.loss_scaler
  local m = model.Model(stages)
  m.cfg = cfg
  -- `dsrun ckpt export` writes what gpt.save_safetensors does (ds.export)
  m.export = {name = gpt.hf_name, transpose = gpt.is_conv1d, metadata = {format = 'pt'}}
  return m
end

-- Training FLOPs per token at context T, as the benchmarks count them (bench/kernels,
-- bench/gpt/torch_gpt.py): 6 per parameter (forward 2, backward 4) plus attention's
-- 12 * layers * d * T (QK^T and AV, forward and backward).
function gpt.flops_per_token(cfg, T, nparams)
  return 6 * nparams + 12 * cfg.layers * cfg.d * T
end

-- Hugging Face GPT-2 names and layouts: "transformer." prefix; Conv1D weights (c_attn,
-- c_proj, c_fc) stored [in, out], i.e. transposed from our [out, in]; lm_head not stored.
local CONV1D = {['attn.c_attn.weight'] = true, ['attn.c_proj.weight'] = true,
                ['mlp.c_fc.weight'] = true, ['mlp.c_proj.weight'] = true}

function gpt.hf_name(name) return 'transformer.' .. name end

function gpt.is_conv1d(name)
  local tail = name:match('^h%.%d+%.(.*)$')
  return tail ~= nil and CONV1D[tail] == true
end

local function shape_str(t)
  return '[' .. table.concat(t:shape(), ', ') .. ']'
end

-- Writes the model's weights to path as a Hugging Face GPT-2 safetensors file
-- (transformer.* names, Conv1D weights transposed to [in, out], lm_head left out: tied).
-- Collective when the world has more than one rank (every rank calls it): rank 0 writes,
-- and every rank returns once the file is there.
function gpt.save_safetensors(m, path)
  local core = require 'ds._core'
  if not core.safetensors then util.error('gpt.save_safetensors: this build has no safetensors support') end
  local world = core.world_size and core.world_size() or 1
  m:with_params(function() -- ZeRO-3: the full parameters exist only inside (collective)
    if world > 1 and core.rank() ~= 0 then return end
    local out = {}
    for _, p in ipairs(m:parameters()) do
      local v = p.stage:param(p.name)
      out[gpt.hf_name(p.name)] = gpt.is_conv1d(p.name) and v:transposed() or v
    end
    core.safetensors.save(path, out, {format = 'pt'})
  end)
  if world > 1 then core.comm.barrier() end
end

-- Buffers and tied weights a Hugging Face file may carry that are not parameters here.
local function ignorable(name)
  return name:match('%.attn%.bias$') or name:match('%.attn%.masked_bias$') or name == 'lm_head.weight'
end

-- Loads weights saved by save_safetensors or by Hugging Face (with or without the
-- "transformer." prefix). Every parameter must be present with its shape.
function gpt.load_safetensors(m, path)
  local core = require 'ds._core'
  if not core.safetensors then util.error('gpt.load_safetensors: this build has no safetensors support') end
  local file = core.safetensors.load(path)
  local used = {}
  m:with_params(function() -- ZeRO-3: written into the gathered parameters, then stored
    for _, p in ipairs(m:parameters()) do
      local key = gpt.hf_name(p.name)
      local t = file[key]
      if not t then key = p.name; t = file[key] end
      if not t then util.errorf("gpt.load_safetensors: %s has no tensor '%s'", path, gpt.hf_name(p.name)) end
      -- Any float dtype: copy() rounds into the stage's precision (docs/precision.md).
      local dt = t:dtype()
      if dt ~= 'fp32' and dt ~= 'bf16' and dt ~= 'fp16' then
        util.errorf("gpt.load_safetensors: %s: '%s' is %s (fp32, bf16 or fp16 expected)", path, key, dt)
      end
      if gpt.is_conv1d(p.name) then
        if #t:shape() ~= 2 then util.errorf("gpt.load_safetensors: %s: '%s' is %s, expected 2-D", path, key, shape_str(t)) end
        t = t:transposed()
      end
      local dst = p.stage:param(p.name)
      if shape_str(t) ~= shape_str(dst) then
        util.errorf("gpt.load_safetensors: %s: '%s' is %s, the model needs %s", path, key, shape_str(t), shape_str(dst))
      end
      dst:copy(t)
      used[key] = true
    end
  end, true)
  for name in pairs(file) do
    if not used[name] and not ignorable(name) then
      util.errorf("gpt.load_safetensors: %s: unexpected tensor '%s' (a different model?)", path, name)
    end
  end
end

return gpt
