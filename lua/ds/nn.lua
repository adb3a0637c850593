-- Layers in the idiom of torch7's nn: objects built from config tables and composed.
-- A layer here is a description (kind + config); ds.Stage turns a list of them into C
-- layers with one flat parameter buffer, after which forward and backward over the
-- stage run in C. The composite layers (CausalSelfAttention, MLP, TransformerBlock)
-- are written here from the basic ones.
local util = require 'ds.util'
local core = require 'ds._core'

local nn = {}

local Module = {}
Module.__index = Module
function Module:__tostring()
  return string.format('nn.%s%s', self.kind, self.name and ("'" .. self.name .. "'") or '')
end
-- container:add(layer [, name]) appends a child (torch7's Sequential:add).
function Module:add(layer)
  if not self.container then util.errorf('nn.%s is not a container', self.kind) end
  if getmetatable(layer) ~= Module then util.errorf('%s:add: expected a layer, got %s', tostring(self), type(layer)) end
  self[#self + 1] = layer
  return self
end

local function new(kind, fields)
  fields.kind = kind
  return setmetatable(fields, Module)
end

function nn.is_layer(x) return getmetatable(x) == Module end

local function opts(cfg, what, allowed)
  cfg = cfg or {}
  allowed.name = true
  util.check_keys(cfg, allowed, what)
  if cfg.name ~= nil and type(cfg.name) ~= 'string' then util.errorf('%s: name must be a string', what) end
  return cfg
end

function nn.Linear(cfg)
  cfg = opts(cfg, 'nn.Linear', util.set {'in', 'out', 'bias', 'std', 'tie'})
  local l = new('Linear', {
    name = cfg.name,
    ['in'] = util.int(cfg, 'in', 'nn.Linear', nil, 1),
    out = util.int(cfg, 'out', 'nn.Linear', nil, 1),
    bias = util.bool(cfg, 'bias', 'nn.Linear', true),
    std = util.num(cfg, 'std', 'nn.Linear', 0.02, 0),
  })
  if cfg.tie ~= nil then
    if not nn.is_layer(cfg.tie) or (cfg.tie.kind ~= 'Embedding' and cfg.tie.kind ~= 'Linear') then
      util.error('nn.Linear: tie must be an nn.Embedding or nn.Linear layer')
    end
    local w = cfg.tie.kind == 'Embedding' and {cfg.tie.vocab, cfg.tie.d} or {cfg.tie.out, cfg.tie['in']}
    if w[1] ~= l.out or w[2] ~= l['in'] then
      util.errorf('nn.Linear: tie: weight is [%d, %d], this layer needs [out=%d, in=%d]', w[1], w[2], l.out, l['in'])
    end
    l.tie = cfg.tie
  end
  return l
end

function nn.Embedding(cfg)
  cfg = opts(cfg, 'nn.Embedding', util.set {'vocab', 'd', 'std'})
  return new('Embedding', {name = cfg.name, vocab = util.int(cfg, 'vocab', 'nn.Embedding', nil, 1),
    d = util.int(cfg, 'd', 'nn.Embedding', nil, 1), std = util.num(cfg, 'std', 'nn.Embedding', 0.02, 0)})
end

-- Learned position embedding, added to its input [B, T, d] (GPT-2's wpe).
function nn.PositionEmbedding(cfg)
  cfg = opts(cfg, 'nn.PositionEmbedding', util.set {'context', 'd', 'std'})
  return new('PositionEmbedding', {name = cfg.name,
    context = util.int(cfg, 'context', 'nn.PositionEmbedding', nil, 1),
    d = util.int(cfg, 'd', 'nn.PositionEmbedding', nil, 1),
    std = util.num(cfg, 'std', 'nn.PositionEmbedding', 0.02, 0)})
end

function nn.LayerNorm(cfg)
  cfg = opts(cfg, 'nn.LayerNorm', util.set {'d', 'eps'})
  return new('LayerNorm', {name = cfg.name, d = util.int(cfg, 'd', 'nn.LayerNorm', nil, 1),
    eps = util.num(cfg, 'eps', 'nn.LayerNorm', 1e-5, 0)})
end

function nn.GELU(cfg)
  cfg = opts(cfg, 'nn.GELU', {})
  return new('GELU', {name = cfg.name})
end

function nn.Dropout(cfg)
  cfg = opts(cfg, 'nn.Dropout', util.set {'p'})
  local p = util.num(cfg, 'p', 'nn.Dropout', 0.1, 0, 1)
  if p >= 1 then util.error('nn.Dropout: p must be < 1') end
  return new('Dropout', {name = cfg.name, p = p})
end

-- The attention core: packed q|k|v [B, T, 3C] -> [B, T, C], causal, `heads` heads;
-- dropout (default 0): dropout on the attention probabilities in training.
function nn.Attention(cfg)
  cfg = opts(cfg, 'nn.Attention', util.set {'heads', 'dropout'})
  local p = util.num(cfg, 'dropout', 'nn.Attention', 0.0, 0, 1)
  if p >= 1 then util.error('nn.Attention: dropout must be < 1') end
  return new('Attention', {name = cfg.name, heads = util.int(cfg, 'heads', 'nn.Attention', nil, 1), p = p})
end

local function container(kind, cfg)
  cfg = cfg or {}
  util.check_keys(cfg, {name = true}, 'nn.' .. kind)
  local c = new(kind, {name = cfg.name, container = true})
  for i, l in ipairs(cfg) do
    if not nn.is_layer(l) then util.errorf('nn.%s: element %d is not a layer (%s)', kind, i, type(l)) end
    c[i] = l
  end
  return c
end

function nn.Sequential(cfg) return container('Sequential', cfg) end
-- out = x + f(x), f the listed layers in sequence.
function nn.Residual(cfg) return container('Residual', cfg) end

-- GPT-2's attention: c_attn (d -> 3d), causal attention (dropout on its probabilities,
-- default 0), c_proj (d -> d).
function nn.CausalSelfAttention(cfg)
  cfg = opts(cfg, 'nn.CausalSelfAttention', util.set {'d', 'heads', 'dropout', 'proj_std', 'std'})
  local d = util.int(cfg, 'd', 'nn.CausalSelfAttention', nil, 1)
  local heads = util.int(cfg, 'heads', 'nn.CausalSelfAttention', nil, 1)
  if d % heads ~= 0 then util.errorf('nn.CausalSelfAttention: d = %d is not divisible by heads = %d', d, heads) end
  local std = util.num(cfg, 'std', 'nn.CausalSelfAttention', 0.02, 0)
  return nn.Sequential {name = cfg.name or 'attn',
    nn.Linear {name = 'c_attn', ['in'] = d, out = 3 * d, std = std},
    nn.Attention {heads = heads, dropout = util.num(cfg, 'dropout', 'nn.CausalSelfAttention', 0.0, 0, 1)},
    nn.Linear {name = 'c_proj', ['in'] = d, out = d, std = util.num(cfg, 'proj_std', 'nn.CausalSelfAttention', std, 0)}}
end

-- GPT-2's MLP: c_fc (d -> 4d), tanh-GELU, c_proj (4d -> d).
function nn.MLP(cfg)
  cfg = opts(cfg, 'nn.MLP', util.set {'d', 'hidden', 'proj_std', 'std'})
  local d = util.int(cfg, 'd', 'nn.MLP', nil, 1)
  local std = util.num(cfg, 'std', 'nn.MLP', 0.02, 0)
  local h = util.int(cfg, 'hidden', 'nn.MLP', 4 * d, 1)
  return nn.Sequential {name = cfg.name or 'mlp',
    nn.Linear {name = 'c_fc', ['in'] = d, out = h, std = std},
    nn.GELU {},
    nn.Linear {name = 'c_proj', ['in'] = h, out = d, std = util.num(cfg, 'proj_std', 'nn.MLP', std, 0)}}
end

-- GPT-2's pre-LN block: x + drop(attn(ln_1(x))), then + drop(mlp(ln_2(x))); the
-- attention drops its probabilities with the same p (GPT-2's attn_pdrop = resid_pdrop).
function nn.TransformerBlock(cfg)
  cfg = opts(cfg, 'nn.TransformerBlock', util.set {'d', 'heads', 'dropout', 'eps', 'std', 'proj_std'})
  local w = 'nn.TransformerBlock'
  local d, heads = util.int(cfg, 'd', w, nil, 1), util.int(cfg, 'heads', w, nil, 1)
  local p = util.num(cfg, 'dropout', w, 0.0, 0, 1)
  local eps = util.num(cfg, 'eps', w, 1e-5, 0)
  local std = util.num(cfg, 'std', w, 0.02, 0)
  local proj_std = util.num(cfg, 'proj_std', w, std, 0)
  return nn.Sequential {name = cfg.name,
    nn.Residual {
      nn.LayerNorm {name = 'ln_1', d = d, eps = eps},
      nn.CausalSelfAttention {d = d, heads = heads, dropout = p, std = std, proj_std = proj_std},
      nn.Dropout {p = p}},
    nn.Residual {
      nn.LayerNorm {name = 'ln_2', d = d, eps = eps},
      nn.MLP {d = d, std = std, proj_std = proj_std},
      nn.Dropout {p = p}}}
end

-- Criterion: mean cross-entropy of logits [..., V] against int32 targets [...]
-- (negative targets are ignored).
local CrossEntropy = {}
CrossEntropy.__index = CrossEntropy
function nn.CrossEntropy(cfg)
  util.check_keys(cfg or {}, {}, 'nn.CrossEntropy')
  return setmetatable({kind = 'CrossEntropy', c = core.crossentropy_new()}, CrossEntropy)
end
function CrossEntropy:forward(logits, targets) return self.c:forward(logits, targets) end
-- Gradient of scale * loss w.r.t. the logits, written over the logits tensor (which it
-- returns): no second [N, V] buffer. Once per forward.
function CrossEntropy:backward(scale) return self.c:backward(scale or 1.0) end
-- forward then backward in one pass, the same bits: loss, dlogits (the logits tensor).
function CrossEntropy:forward_backward(logits, targets, scale)
  return self.c:forward_backward(logits, targets, scale or 1.0)
end
function CrossEntropy:release() self.c:release() end

return nn
