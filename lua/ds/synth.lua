-- Synthetic token data for examples and tests, made here (nothing downloaded): each
-- window is an arithmetic progression modulo the vocabulary, start and stride drawn per
-- window. A model can only learn it by looking back (the stride is in the first two
-- tokens), so falling loss shows attention, embeddings and the head all train. The best
-- achievable mean loss is about ln(#strides) / T (only the second token is uncertain
-- once the first is seen), and it starts near ln(vocab).
local util = require 'ds.util'
local core = require 'ds._core'

local synth = {}

local STRIDES = {1, 2, 3, 5, 7}

-- synth.progressions{vocab=, context=, batch=, seed=0, rank=, world_size=} -> source;
-- source:batch(step, micro) -> x, y int32 [batch, context]: this rank's rows of a global
-- batch of batch x world_size windows, deterministic from (seed, step, micro). As with the
-- token-file loader (docs/data.md), rank r takes rows [r*batch, (r+1)*batch), so the
-- global batch is the same at any world size; rank and world_size default to this rank's.
-- batch and seed not given are the job's ([engine] micro_batch and seed).
function synth.progressions(cfg)
  util.check_keys(cfg, util.set {'vocab', 'context', 'batch', 'seed', 'rank', 'world_size'}, 'synth.progressions')
  local model = require 'ds.model'
  local batch = model.job_value('micro_batch', cfg.batch, 'synth.progressions batch')
  local seed = model.job_value('seed', cfg.seed, 'synth.progressions seed')
  local s = {vocab = util.int(cfg, 'vocab', 'synth', nil, 8), context = util.int(cfg, 'context', 'synth', nil, 2),
             batch_size = util.int({batch = batch}, 'batch', 'synth', nil, 1), seed = util.int({seed = seed}, 'seed', 'synth', 0),
             world_size = util.int(cfg, 'world_size', 'synth', cfg.world_size or core.world_size(), 1)}
  s.rank = util.int(cfg, 'rank', 'synth', cfg.rank or core.rank(), 0)
  if s.rank >= s.world_size then
    util.errorf('synth: rank %d outside the world of %d', s.rank, s.world_size)
  end
  s.global_batch = s.batch_size * s.world_size
  function s:batch(step, micro)
    local B, T, V = self.batch_size, self.context, self.vocab
    local x, y = core.tensor('int32', B, T), core.tensor('int32', B, T)
    math.randomseed(self.seed, (step or 0) * 65536 + (micro or 0))
    -- One stream draws the global batch's rows in order: pass over the earlier ranks'.
    for _ = 1, self.rank * B do
      math.random(0, V - 1)
      math.random(1, #STRIDES)
    end
    for b = 0, B - 1 do
      local start, stride = math.random(0, V - 1), STRIDES[math.random(1, #STRIDES)]
      for t = 0, T - 1 do
        x:set(b * T + t + 1, (start + t * stride) % V)
        y:set(b * T + t + 1, (start + (t + 1) * stride) % V)
      end
    end
    return x, y
  end
  return s
end

return synth
