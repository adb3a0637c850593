-- A tiny GPT that trains in seconds on 2 cores (synthetic progressions data).
return {
  model = {vocab = 64, context = 32, layers = 2, heads = 4, d = 64, dropout = 0.0},
  batch = 8, accum = 2, steps = 200,
  lr = 1e-2, min_lr = 3e-4, warmup = 10, weight_decay = 0.1, betas = {0.9, 0.95}, clip = 1.0,
  data = 'synthetic', log_every = 10, -- seed: the job's [engine] seed (1234)
  blocks = {}, -- stage options, e.g. {checkpoint = 'full'}; default: the job's [engine]
}
