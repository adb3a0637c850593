/* Stages, containers and optimizers through the engine's Lua API: checkpointing is exact,
 * runs are deterministic, the flat buffer layout and parameter table are what ZeRO needs,
 * optimizers work on any sub-range, weight decay skips biases and LayerNorm weights,
 * gradient accumulation matches one big batch, dropout's backward uses its forward's
 * mask, weights round-trip through safetensors in Hugging Face's layout. Each test is a
 * Lua chunk with asserts; a failed assert fails the test with its message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"
#include "engine_test_lua.h"

/* Shared helpers for the chunks. */
static const char *PRELUDE =
    "ds = require 'ds'; gpt = require 'ds.gpt'; nn = ds.nn\n"
    "function batch(B, T, V, salt)\n"
    "  local x, y = ds.tensor('int32', B, T), ds.tensor('int32', B, T)\n"
    "  for i = 1, B * T do x:set(i, (i * 7 + salt) % V); y:set(i, (i * 5 + 3 * salt) % V) end\n"
    "  return x, y\n"
    "end\n"
    "function flat(m, what)\n" /* all stages' params (or grads) as one Lua array */
    "  local out = {}\n"
    "  for _, s in ipairs(m.stages) do\n"
    "    local t = what == 'grads' and s:grads() or s:params()\n"
    "    for _, v in ipairs(t:to_table()) do out[#out + 1] = v end\n"
    "  end\n"
    "  return out\n"
    "end\n"
    "function same(a, b, what)\n"
    "  assert(#a == #b, what .. ': lengths differ')\n"
    "  for i = 1, #a do\n"
    "    if a[i] ~= b[i] then error(string.format('%s: element %d: %.9g vs %.9g', what, i, a[i], b[i])) end\n"
    "  end\n"
    "end\n"
    "CFG = {vocab=13, context=6, layers=4, heads=2, d=8, dropout=0.2}\n";

static void run_chunk(const char *code) {
    lua_State *L = eng_lua_new();
    assert_non_null(L);
    assert_int_equal(eng_lua_run(L, PRELUDE, 0), 0);
    assert_int_equal(eng_lua_run(L, code, 0), 0);
    eng_lua_close(L);
}

/* Checkpointing recomputes exactly (dropout masks keyed, not saved): loss and every
 * gradient are bit-identical with checkpoint none / full / every 2, and the checkpointed
 * run holds fewer activation bytes at its peak. */
static void test_checkpoint_is_exact_and_saves_memory(void **state) {
    (void)state;
    run_chunk(
        "local x, y = batch(3, 6, 13, 1)\n"
        "local res = {}\n"
        "for _, ck in ipairs {'none', 'full', 2} do\n"
        "  local m = gpt.GPT(CFG, {seed = 5, blocks = {checkpoint = ck}})\n"
        "  m:zero_grad()\n"
        "  local base = ds.memory().activations.current\n"
        "  ds.memory_reset_peaks()\n"
        "  local loss = m:forward(x, y, {step = 3, micro = 1})\n"
        "  m:backward(1.0)\n"
        "  local peak = ds.memory().activations.peak - base\n"
        "  res[#res + 1] = {loss = loss, grads = flat(m, 'grads'), peak = peak}\n"
        "  m:release()\n"
        "end\n"
        "for i = 2, 3 do\n"
        "  assert(res[i].loss == res[1].loss, 'loss differs with checkpointing')\n"
        "  same(res[1].grads, res[i].grads, 'gradients with checkpointing ' .. i)\n"
        "end\n"
        "assert(res[2].peak < res[1].peak, string.format('full checkpointing peak %d >= none %d', res[2].peak, res[1].peak))\n"
        "assert(res[3].peak < res[1].peak, 'checkpoint every 2 saves nothing')\n");
}

/* The criterion's backward writes its gradient over the logits: it returns the logits
 * tensor itself, allocates no activation byte (a separate [N, V] gradient took N.V.4),
 * the values are scale/N * (softmax - onehot) of the logits it overwrote, a second
 * backward is refused, and the fused forward_backward gives the same loss and gradients,
 * bit for bit, as forward then backward, also with the head stage checkpointed. */
static void test_criterion_backward_in_place(void **state) {
    (void)state;
    run_chunk(
        "local x, y = batch(3, 6, 13, 1)\n"
        "local N, V = 18, 13\n"
        "local m = gpt.GPT(CFG, {seed = 5})\n"
        "m:zero_grad()\n"
        "local loss = m:forward(x, y, {step = 3, micro = 1})\n"
        "local logits = m.output:to_table()\n"
        "local act = ds.memory().activations.current\n"
        "ds.memory_reset_peaks()\n"
        "local d = m.criterion:backward(0.5)\n"
        "assert(rawequal(d, m.output), 'backward did not return the logits tensor')\n"
        "local mem = ds.memory().activations\n"
        "assert(mem.peak == act and mem.current == act, string.format("
        "'the criterion took %d activation bytes', mem.peak - act))\n"
        "local g = d:to_table()\n"
        "for n = 0, N - 1 do\n"
        "  local mx, s = -math.huge, 0\n"
        "  for v = 1, V do mx = math.max(mx, logits[n * V + v]) end\n"
        "  for v = 1, V do s = s + math.exp(logits[n * V + v] - mx) end\n"
        "  for v = 1, V do\n"
        "    local want = 0.5 / N * (math.exp(logits[n * V + v] - mx) / s - (v - 1 == y:get(n + 1) and 1 or 0))\n"
        "    assert(math.abs(g[n * V + v] - want) < 1e-7, string.format('row %d col %d: %.9g want %.9g', n, v, g[n * V + v], want))\n"
        "  end\n"
        "end\n"
        "local ok, err = pcall(m.criterion.backward, m.criterion, 0.5)\n"
        "assert(not ok and err:find('backward ran already', 1, true), tostring(err))\n"
        "m:zero_grad()\n"
        "local l1 = m:forward(x, y, {step = 3, micro = 1}); m:backward(0.5)\n"
        "local g1 = flat(m, 'grads')\n"
        "m:zero_grad()\n"
        "local l2 = m:forward_backward(x, y, {step = 3, micro = 1}, 0.5)\n"
        "assert(l1 == loss and l2 == l1, 'fused loss differs')\n"
        "same(g1, flat(m, 'grads'), 'gradients of forward_backward')\n"
        "ok, err = pcall(m.criterion.backward, m.criterion, 0.5)\n"
        "assert(not ok and err:find('backward ran already', 1, true), tostring(err))\n"
        "m:release()\n"
        /* a checkpointed head recomputes its Linear into a buffer of its own: the logits
         * the gradient was written over are the span's output, read by nobody after */
        "local c = gpt.GPT(CFG, {seed = 5, head = {checkpoint = 'full'}})\n"
        "c:zero_grad()\n"
        "assert(c:forward_backward(x, y, {step = 3, micro = 1}, 0.5) == l1, 'checkpointed head: loss')\n"
        "same(g1, flat(c, 'grads'), 'gradients with the head checkpointed')\n"
        "c:release()\n");
}

/* The same run twice gives the same bits, dropout and AdamW included; a different step
 * draws different dropout masks. */
static void test_runs_are_deterministic(void **state) {
    (void)state;
    run_chunk(
        "local function train(steps)\n"
        "  local m = gpt.GPT(CFG, {seed = 9})\n"
        "  local opt = ds.optim.AdamW {m, lr = 1e-2, weight_decay = 0.1}\n"
        "  local losses = {}\n"
        "  for step = 1, steps do\n"
        "    local st = m:train_step {step = step, accum = 2, optimizer = opt, clip = 1.0,\n"
        "      next_batch = function(micro) return batch(2, 6, 13, step * 10 + micro) end}\n"
        "    losses[step] = st.loss\n"
        "  end\n"
        "  return flat(m, 'params'), losses\n"
        "end\n"
        "local a, la = train(3)\n"
        "local b, lb = train(3)\n"
        "same(a, b, 'parameters after 3 steps')\n"
        "same(la, lb, 'losses')\n"
        "local m = gpt.GPT(CFG, {seed = 9})\n"
        "local x, y = batch(2, 6, 13, 0)\n"
        "local l1 = m:forward(x, y, {step = 1})\n"
        "local l2 = m:forward(x, y, {step = 2})\n"
        "local l3 = m:forward(x, y, {step = 1})\n"
        "assert(l1 ~= l2, 'dropout mask does not depend on the step')\n"
        "assert(l1 == l3, 'dropout mask is not a function of its key')\n"
        "local e1 = m:forward(x, y, {train = false})\n"
        "local e2 = m:forward(x, y, {train = false})\n"
        "assert(e1 == e2 and e1 ~= l1, 'evaluation must not drop')\n");
}

/* The flat buffer: parameters in order, 16-float aligned, no overlap, padding counted in
 * numel; decay off for biases and LayerNorm weights, on for matrices and embeddings; the
 * tied head owns no parameter. Initial values: LayerNorm ones, biases zeros, matrices
 * with std 0.02, residual projections 0.02/sqrt(2*layers); independent of staging. */
static void test_flat_layout_and_parameter_table(void **state) {
    (void)state;
    run_chunk(
        "local m = gpt.GPT({vocab=50, context=8, layers=3, heads=2, d=16}, {seed = 3})\n"
        "for _, s in ipairs(m.stages) do\n"
        "  local pt, at = s:param_table(), 0\n"
        "  for _, p in ipairs(pt) do\n"
        "    assert(p.offset % 16 == 0 and p.offset >= at, p.name .. ': misplaced')\n"
        "    at = p.offset + p.numel\n"
        "    local n = 1; for _, d in ipairs(p.shape) do n = n * d end\n"
        "    assert(n == p.numel, p.name .. ': shape and numel disagree')\n"
        "    local nodecay = p.name:match('bias$') or p.name:match('ln_[%wf]*%.weight$')\n"
        "    assert(p.decay == not nodecay, p.name .. ': wrong decay flag')\n"
        "  end\n"
        "  assert(s:info().numel >= at and s:info().numel % 16 == 0)\n"
        "end\n"
        "assert(#m.stages[3]:param_table() == 2, 'the tied head must own no weight')\n"
        "local function stats(name)\n"
        "  local t = m:param(name):to_table(); local s, ss = 0, 0\n"
        "  for _, v in ipairs(t) do s = s + v; ss = ss + v * v end\n"
        "  return s / #t, math.sqrt(ss / #t - (s / #t) ^ 2)\n"
        "end\n"
        "local _, sd = stats('h.0.mlp.c_fc.weight'); assert(math.abs(sd - 0.02) < 0.002, 'c_fc std ' .. sd)\n"
        "local _, sp = stats('h.1.mlp.c_proj.weight'); local want = 0.02 / math.sqrt(6)\n"
        "assert(math.abs(sp - want) < 0.1 * want, 'c_proj std ' .. sp)\n"
        "assert(stats('h.2.ln_1.weight') == 1 and stats('h.2.attn.c_attn.bias') == 0)\n"
        /* the same parameter has the same initial values whatever the staging */
        "local m2 = gpt.GPT({vocab=50, context=8, layers=3, heads=2, d=16}, {seed = 3,\n"
        "  blocks = {{layers = 1}, {layers = 2, checkpoint = 'full'}}})\n"
        "same(m:param('h.2.attn.c_attn.weight'):to_table(), m2:param('h.2.attn.c_attn.weight'):to_table(), 'init across stagings')\n"
        "assert(#m2.stages == 4)\n"
        /* and whatever the thread count (wte is large enough to be split) */
        "local big = {vocab=600, context=8, layers=1, heads=2, d=256}\n"
        "ds.set_threads(1); local t1 = gpt.GPT(big, {seed = 3}):param('wte.weight'):to_table()\n"
        "ds.set_threads(2); local t2 = gpt.GPT(big, {seed = 3}):param('wte.weight'):to_table()\n"
        "same(t1, t2, 'init with 1 and 2 threads')\n");
}

/* Optimizers on sub-ranges (what a ZeRO shard runs) give the same bits as on the whole
 * buffer, cut in the middle of a parameter. Weight decay skips no-decay parameters. */
static void test_optimizer_ranges_and_decay(void **state) {
    (void)state;
    run_chunk(
        "local function step_with(cuts, kind)\n"
        "  local m = gpt.GPT(CFG, {seed = 4})\n"
        "  local x, y = batch(2, 6, 13, 2)\n"
        "  for t = 1, 2 do\n"
        "    m:zero_grad(); m:forward(x, y, {step = t}); m:backward(1.0)\n"
        "    for _, s in ipairs(m.stages) do\n"
        "      local n = s:info().numel\n"
        "      local bounds = {0}\n"
        "      for _, c in ipairs(cuts) do bounds[#bounds + 1] = math.floor(n * c) end\n"
        "      bounds[#bounds + 1] = n\n"
        "      for i = 1, #bounds - 1 do\n"
        "        local c = {lr = 1e-2, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1,\n"
        "                   t = t, momentum = 0.9, lo = bounds[i], hi = bounds[i + 1]}\n"
        "        if kind == 'adamw' then s:adamw_step(c) else s:sgd_step(c) end\n"
        "      end\n"
        "    end\n"
        "  end\n"
        "  return flat(m, 'params')\n"
        "end\n"
        "for _, kind in ipairs {'adamw', 'sgd'} do\n"
        "  same(step_with({}, kind), step_with({0.37, 0.5, 0.81}, kind), kind .. ' on ranges')\n"
        "end\n"
        /* zero gradients: decayed weights shrink by exactly (1 - lr*wd) in AdamW's
         * decoupled form, biases and LayerNorm weights do not move */
        "local m = gpt.GPT(CFG, {seed = 4})\n"
        "m:zero_grad()\n"
        "local before = {w = m:param('h.0.attn.c_attn.weight'):get(5), b = m:param('h.0.ln_1.weight'):get(2),\n"
        "                e = m:param('wte.weight'):get(7)}\n"
        "local opt = ds.optim.AdamW {m, lr = 0.1, weight_decay = 0.5}\n"
        "opt:step()\n"
        "local w = m:param('h.0.attn.c_attn.weight'):get(5)\n"
        "assert(math.abs(w - before.w * (1 - 0.05)) <= 1e-7 * math.abs(before.w), 'decay not applied to a weight')\n"
        "assert(m:param('h.0.ln_1.weight'):get(2) == before.b, 'decay applied to a LayerNorm weight')\n"
        "assert(m:param('wte.weight'):get(7) ~= before.e, 'decay not applied to the embedding')\n"
        /* SGD with momentum, PyTorch's form: first step p -= lr * g */
        "local m = gpt.GPT(CFG, {seed = 4}); local x, y = batch(2, 6, 13, 2)\n"
        "m:zero_grad(); m:forward(x, y, {train = false}); m:backward(1.0)\n"
        "local p0, g0 = m:param('h.1.mlp.c_fc.bias'):get(3), m:param('h.1.mlp.c_fc.bias', true):get(3)\n"
        "ds.optim.SGD {m, lr = 0.5, momentum = 0.9}:step()\n"
        "local p1 = m:param('h.1.mlp.c_fc.bias'):get(3)\n"
        "assert(math.abs(p1 - (p0 - 0.5 * g0)) < 1e-7, 'sgd first step')\n");
}

/* Accumulating two micro-batches with the loss divided by 2 gives the gradient of the
 * mean loss over both (one batch of twice the size), up to fp32 summation order. Clipping
 * brings the global norm to the limit. LR schedules have their documented shape. */
/* [engine] gradient_clipping (DS_ENGINE_GRADIENT_CLIPPING) clips a train_step that passes
 * no clip: the same bits as clip = 0.05 given by the script, and not those of no clip. */
static void test_job_gradient_clipping(void **state) {
    (void)state;
    setenv("DS_ENGINE_GRADIENT_CLIPPING", "0.05", 1);
    run_chunk(
        "local cfg = {vocab=13, context=6, layers=2, heads=2, d=8, dropout=0}\n"
        "local x, y = batch(2, 6, 13, 1)\n"
        "local function run(clip)\n"
        "  local m = gpt.GPT(cfg, {seed = 2})\n"
        "  local o = ds.optim.SGD {m, lr = 0.1}\n"
        "  local st = m:train_step {step = 1, optimizer = o, clip = clip,\n"
        "                           next_batch = function() return x, y end}\n"
        "  assert(st.grad_norm > 0.05, 'the norm must be above the clip for this test')\n"
        "  return flat(m, 'params')\n"
        "end\n"
        "assert(ds.engine_defaults().gradient_clipping == 0.05)\n"
        "local job, given, none = run(nil), run(0.05), run(1e9)\n"
        "same(job, given, 'job clip vs script clip')\n"
        "local differs = false\n"
        "for i = 1, #job do differs = differs or job[i] ~= none[i] end\n"
        "assert(differs, 'the job clip did not act')\n");
    unsetenv("DS_ENGINE_GRADIENT_CLIPPING");
}

/* The job's training settings reach the ds library: the data loaders' batch and seed,
 * train_step's accumulation, AdamW's settings and ds.optim.schedule() come from
 * DS_ENGINE_* when the script gives none; a script value that differs from one the job
 * states (DS_ENGINE_GIVEN) is noted once; the schedules follow DeepSpeed's formulas. */
static void test_job_training_settings(void **state) {
    (void)state;
    const char *env[][2] = {{"DS_ENGINE_MICRO_BATCH", "3"}, {"DS_ENGINE_GRAD_ACCUM", "2"},
                            {"DS_ENGINE_LR", "0.02"}, {"DS_ENGINE_BETA2", "0.95"},
                            {"DS_ENGINE_LR_SCHEDULE", "warmup_cosine"}, {"DS_ENGINE_WARMUP_STEPS", "10"},
                            {"DS_ENGINE_TOTAL_STEPS", "110"}, {"DS_ENGINE_MIN_LR", "0.002"},
                            {"DS_ENGINE_GIVEN", "micro_batch,grad_accum,lr,beta2"}};
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) setenv(env[i][0], env[i][1], 1);
    run_chunk(
        "local model = require 'ds.model'\n"
        "local notes = {}\n"
        "model.note = function(m) notes[#notes + 1] = m end\n"
        "local cfg = {vocab=13, context=6, layers=1, heads=2, d=8, dropout=0}\n"
        "local src = require('ds.synth').progressions {vocab = 13, context = 6, rank = 0, world_size = 1}\n"
        "assert(src.batch_size == 3 and src.seed == ds.engine_defaults().seed, 'synth from the job')\n"
        "local m = gpt.GPT(cfg, {seed = 2})\n"
        "local o = ds.optim.AdamW {m}\n"
        "assert(o.lr == 0.02 and math.abs(o.beta2 - 0.95) < 1e-12 and o.beta1 == 0.9, 'AdamW from the job')\n"
        "local st = m:train_step {step = 1, optimizer = o, next_batch = function(k) return src:batch(1, k) end}\n"
        "assert(st.tokens == 3 * 6 * 2, 'accumulation from the job: ' .. st.tokens)\n"
        "assert(#notes == 0, 'a note with nothing overridden: ' .. tostring(notes[1]))\n"
        /* a script's own value wins, and the differing ones are said once each */
        "local src8 = require('ds.synth').progressions {vocab = 13, context = 6, batch = 8, rank = 0, world_size = 1}\n"
        "require('ds.synth').progressions {vocab = 13, context = 6, batch = 8, rank = 0, world_size = 1}\n"
        "ds.optim.AdamW {m, lr = 0.02, betas = {0.9, 0.9}}\n"
        "assert(src8.batch_size == 8 and #notes == 2, table.concat(notes, '|'))\n"
        "assert(notes[1]:find(\"synth.progressions batch: the script's micro_batch = 8 is used, not the job's 3\", 1, true), notes[1])\n"
        "assert(notes[2]:find(\"beta2 = 0.9 is used, not the job's 0.95\", 1, true), notes[2])\n"
        /* the schedules: step s is DeepSpeed's iteration s - 1 */
        "local f = ds.optim.schedule()\n"
        "assert(f(1) == 0 and math.abs(f(6) - 0.01) < 1e-15 and math.abs(f(10) - 0.018) < 1e-15, 'cosine warmup')\n"
        "assert(math.abs(f(11) - (0.002 + 0.018 * 0.5 * (1 + math.cos(math.pi / 100)))) < 1e-15, 'cosine start')\n"
        "assert(math.abs(f(61) - (0.002 + 0.018 * 0.5 * (1 + math.cos(math.pi * 51 / 100)))) < 1e-15, 'cosine')\n"
        "assert(f(110) == 0.002 and f(500) == 0.002, 'cosine end')\n"
        "f = ds.optim.schedule {lr_schedule = 'warmup', warmup_type = 'log', warmup_min_lr = 0.01}\n"
        "assert(f(1) == 0.01 and math.abs(f(4) - (0.01 + 0.01 * math.log(4) / math.log(10))) < 1e-15 and f(11) == 0.02)\n"
        "f = ds.optim.schedule {lr_schedule = 'warmup_decay', warmup_type = 'linear', lr = 1.0}\n"
        "assert(f(6) == 0.5 and f(11) == 1.0 and f(61) == 0.5 and f(111) == 0 and f(200) == 0, 'decay')\n"
        "assert(ds.optim.schedule {lr_schedule = 'constant'}(5) == 0.02)\n"
        "local ok, err = pcall(ds.optim.schedule, {lr_schedule = 'warmup_decay', total_steps = 5})\n"
        "assert(not ok and err:find('needs total_steps %(5%) >= warmup_steps %(10%)'), err)\n");
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) unsetenv(env[i][0]);
}

/* [engine] memory_limit: an allocation that would take the rank past it fails, naming
 * what was asked, the limit and what the rank holds per category; below it, training is
 * untouched (the same model trains under a limit above its peak). */
static void test_memory_limit(void **state) {
    (void)state;
    ds_mem_set_limit(256 << 10);
    run_chunk(
        "local ok, err = pcall(gpt.GPT, {vocab=4096, context=8, layers=1, heads=2, d=64})\n"
        "assert(not ok, 'a 1 MiB embedding fit a 256 KiB limit')\n"
        "assert(err:find('beyond this rank.s memory_limit of 0.2 MiB'), err)\n"
        "assert(err:find('bytes of params asked') and err:find('this rank holds params'), err)\n");
    ds_mem_set_limit(64 << 20);
    run_chunk(
        "local m = gpt.GPT(CFG, {seed = 1})\n"
        "local x, y = batch(2, 6, 13, 1)\n"
        "local st = m:train_step {step = 1, optimizer = ds.optim.SGD {m, lr = 0.1},\n"
        "                         next_batch = function() return x, y end}\n"
        "assert(st.loss > 0 and ds.memory().total.peak < 64 * 2^20)\n");
    ds_mem_set_limit(0);
}

static void test_accumulation_clipping_schedules(void **state) {
    (void)state;
    run_chunk(
        "local cfg = {vocab=13, context=6, layers=2, heads=2, d=8, dropout=0}\n"
        "local x1, y1 = batch(2, 6, 13, 1)\n"
        "local x2, y2 = batch(2, 6, 13, 2)\n"
        "local x, y = ds.tensor('int32', 4, 6), ds.tensor('int32', 4, 6)\n"
        "local a, b = x1:to_table(), x2:to_table(); for _, v in ipairs(b) do a[#a + 1] = v end; x:from_table(a)\n"
        "a, b = y1:to_table(), y2:to_table(); for _, v in ipairs(b) do a[#a + 1] = v end; y:from_table(a)\n"
        "local m = gpt.GPT(cfg, {seed = 2})\n"
        "m:zero_grad()\n"
        "local l = m:forward(x1, y1) / 2; m:backward(0.5)\n"
        "l = l + m:forward(x2, y2) / 2; m:backward(0.5)\n"
        "local ga = flat(m, 'grads')\n"
        "m:zero_grad(); local lb = m:forward(x, y); m:backward(1.0)\n"
        "local gb = flat(m, 'grads')\n"
        "assert(math.abs(l - lb) < 1e-6, 'accumulated loss')\n"
        "for i = 1, #ga do\n"
        "  assert(math.abs(ga[i] - gb[i]) <= 1e-6 + 1e-4 * math.abs(gb[i]), 'accumulated gradient ' .. i)\n"
        "end\n"
        "local n0 = m:clip_grad_norm(0.01)\n"
        "assert(n0 > 0.01 and math.abs(m:grad_norm() - 0.01) < 1e-5, 'clipping')\n"
        /* train_step fuses clipping into the optimizer's pass: the same bits as
         * clip_grad_norm followed by a step */
        "local wide = {vocab=1100, context=6, layers=1, heads=2, d=256, dropout=0}\n" /* wte: 2 chunks */
        "for _, kind in ipairs {'AdamW', 'SGD', 'wide'} do\n"
        "  local c = kind == 'wide' and wide or cfg\n"
        "  kind = kind == 'wide' and 'AdamW' or kind\n"
        "  local a, b = gpt.GPT(c, {seed = 2}), gpt.GPT(c, {seed = 2})\n"
        "  local oa, ob = ds.optim[kind] {a, lr = 0.01, weight_decay = 0.1}, ds.optim[kind] {b, lr = 0.01, weight_decay = 0.1}\n"
        "  for step = 1, 2 do\n"
        "    a:zero_grad(); a:forward(x, y); a:backward(1.0); a:clip_grad_norm(0.05); oa:step()\n"
        "    b:train_step {step = step, optimizer = ob, clip = 0.05, next_batch = function() return x, y end}\n"
        "  end\n"
        "  same(flat(a, 'params'), flat(b, 'params'), kind .. ': fused clipping')\n"
        "end\n"
        "local f = ds.optim.warmup_cosine {lr = 1.0, min_lr = 0.1, warmup = 10, total = 110}\n"
        "assert(f(5) == 0.5 and f(10) == 1.0 and math.abs(f(60) - 0.55) < 1e-12 and f(110) == 0.1 and f(200) == 0.1)\n"
        "assert(ds.optim.constant {lr = 0.3}(7) == 0.3)\n");
}

/* Dropout's backward uses the mask its forward drew: din = dout * out/in. */
static void test_dropout_backward_uses_forward_mask(void **state) {
    (void)state;
    run_chunk(
        "local s = ds.Stage {name = 'd', nn.Dropout {p = 0.3}}\n"
        "local x = ds.tensor('fp32', 4, 50)\n"
        "for i = 1, 200 do x:set(i, 1 + i / 100) end\n"
        "local out = s:forward(x, true, 7, 1)\n"
        "local dout = ds.tensor('fp32', 4, 50)\n"
        "for i = 1, 200 do dout:set(i, math.sin(i)) end\n"
        "local din = s:backward(dout)\n"
        "local dropped = 0\n"
        "for i = 1, 200 do\n"
        "  local keep = out:get(i) ~= 0\n"
        "  if not keep then dropped = dropped + 1 end\n"
        "  local want = keep and dout:get(i) / 0.7 or 0\n"
        "  assert(math.abs(din:get(i) - want) < 1e-6, 'mask differs at ' .. i)\n"
        "  if keep then assert(math.abs(out:get(i) - x:get(i) / 0.7) < 1e-5) end\n"
        "end\n"
        "assert(dropped > 30 and dropped < 90, 'dropped ' .. dropped .. ' of 200 at p = 0.3')\n");
}

/* Attention dropout (nn.Attention's dropout, on the probabilities) in training only,
 * exact under checkpoint recomputation; masks keyed by global batch row (row0): a slice
 * of the batch run with its row0 draws the whole batch's masks for those rows. */
static void test_attention_dropout(void **state) {
    (void)state;
    run_chunk(
        "local function stage(ck, p)\n"
        "  return ds.Stage {name = 'a', seed = 3, checkpoint = ck,\n"
        "    nn.Linear {name = 'c_attn', ['in'] = 8, out = 24},\n"
        "    nn.Attention {heads = 2, dropout = p},\n"
        "    nn.Dropout {p = p},\n"
        "    nn.Linear {name = 'c_proj', ['in'] = 8, out = 8}}\n"
        "end\n"
        "local function fill(B, first, f)\n"
        "  local t = ds.tensor('fp32', B, 5, 8)\n"
        "  for i = 1, B * 40 do t:set(i, f(first + i)) end\n"
        "  return t\n"
        "end\n"
        "local function run(s, B, row0, train)\n"
        "  local first = row0 * 40\n"
        "  local x = fill(B, first, function(i) return math.sin(i * 0.37) end)\n"
        "  local dout = fill(B, first, function(i) return math.cos(i * 0.11) end)\n"
        "  s:zero_grad()\n"
        "  local out = s:forward(x, train ~= false, 4, 1, row0):to_table()\n"
        "  local din = s:backward(dout):to_table()\n"
        "  return {out = out, din = din, grads = s:grads():to_table()}\n"
        "end\n"
        "local a = run(stage('none', 0.3), 4, 0)\n"
        "local b = run(stage('full', 0.3), 4, 0)\n"
        "same(a.out, b.out, 'output with checkpointing')\n"
        "same(a.din, b.din, 'input gradient with checkpointing')\n"
        "same(a.grads, b.grads, 'parameter gradients with checkpointing')\n"
        "local e = run(stage('none', 0.3), 4, 0, false)\n"
        "local z = run(stage('none', 0), 4, 0)\n"
        "same(e.out, z.out, 'evaluation must not drop')\n"
        "local differ = 0\n"
        "for i = 1, #a.out do if a.out[i] ~= e.out[i] then differ = differ + 1 end end\n"
        "assert(differ > #a.out / 2, 'dropout changed only ' .. differ .. ' outputs')\n"
        /* rows 3..4 alone at row0 = 2: the same masks as in the whole batch */
        "local function close(x, y, what)\n"
        "  for i = 1, #x do\n"
        "    if math.abs(x[i] - y[i]) > 1e-6 + 1e-5 * math.abs(y[i]) then\n"
        "      error(string.format('%s: element %d: %.9g vs %.9g', what, i, x[i], y[i]))\n"
        "    end\n"
        "  end\n"
        "end\n"
        "local s = stage('none', 0.3)\n"
        "local whole, half = run(s, 4, 0), run(s, 2, 2)\n"
        "local tail = {out = {}, din = {}}\n"
        "for i = 81, 160 do tail.out[i - 80] = whole.out[i]; tail.din[i - 80] = whole.din[i] end\n"
        "close(half.out, tail.out, 'rows 3..4 output at row0 = 2')\n"
        "close(half.din, tail.din, 'rows 3..4 input gradient at row0 = 2')\n"
        "local wrong = run(s, 2, 0)\n"
        "local ok = pcall(close, wrong.out, tail.out, '')\n"
        "assert(not ok, 'row0 does not key the masks')\n");
}

/* Attention dropout's input gradient is the derivative of the dropped forward: a forward
 * under the same key (seed, step, layer, micro-batch, row0) draws the same mask, so
 * central differences of sum(out * dout) along random directions of the input match
 * din . direction (fp32 forward, differences in double: ~1e-4 relative). */
static void test_attention_dropout_gradient(void **state) {
    (void)state;
    run_chunk(
        "local B, T, n = 2, 5, 80\n"
        "local s = ds.Stage {name = 'a', seed = 3,\n"
        "  nn.Linear {name = 'c_attn', ['in'] = 8, out = 24},\n"
        "  nn.Attention {heads = 2, dropout = 0.3},\n"
        "  nn.Linear {name = 'c_proj', ['in'] = 8, out = 8}}\n"
        "local w = s:params()\n" /* O(1) weights: probabilities far from uniform */
        "for i = 1, w:numel() do w:set(i, 0.6 * math.sin(i * 1.3)) end\n"
        "local x, dout = ds.tensor('fp32', B, T, 8), ds.tensor('fp32', B, T, 8)\n"
        "for i = 1, n do x:set(i, math.sin(i * 0.37)); dout:set(i, math.cos(i * 0.11)) end\n"
        "local function f(at)\n"
        "  local out, sum = s:forward(at, true, 4, 1, 0), 0\n"
        "  for i = 1, n do sum = sum + out:get(i) * dout:get(i) end\n"
        "  return sum\n"
        "end\n"
        "s:zero_grad()\n"
        "local f0 = f(x)\n"
        "local din = s:backward(dout):to_table()\n"
        "local e = s:forward(x, false, 4, 1, 0)\n"
        "local ev = 0\n"
        "for i = 1, n do ev = ev + e:get(i) * dout:get(i) end\n"
        "assert(math.abs(ev - f0) > 1e-3, 'dropout changed nothing')\n"
        "math.randomseed(5)\n"
        "for k = 1, 3 do\n"
        "  local xp, xm = ds.tensor('fp32', B, T, 8), ds.tensor('fp32', B, T, 8)\n"
        "  local eps, want = 1e-2, 0\n"
        "  for i = 1, n do\n"
        "    local d = math.random() - 0.5\n"
        "    xp:set(i, x:get(i) + eps * d); xm:set(i, x:get(i) - eps * d)\n"
        "    want = want + din[i] * d\n"
        "  end\n"
        "  local fd = (f(xp) - f(xm)) / (2 * eps)\n"
        "  assert(math.abs(want - fd) < 2e-4 + 1e-3 * math.abs(fd),\n"
        "         string.format('direction %d: din gives %.7g, differences %.7g', k, want, fd))\n"
        "end\n");
}

/* Attention with dropout holds what it holds without: the log-sum-exp per row, O(B.NH.T),
 * not the [B,NH,T,T] probabilities (kept for backward) and scratch (in backward) it took
 * before the fused kernels took dropout: at T = 64 that tensor alone (64 KiB) is more than
 * all the stage's activations. */
static void test_attention_dropout_memory(void **state) {
    (void)state;
    run_chunk(
        "local B, T = 2, 64\n"
        "local function held(p)\n"
        "  local s = ds.Stage {name = 'a', seed = 3,\n"
        "    nn.Linear {name = 'c_attn', ['in'] = 8, out = 24},\n"
        "    nn.Attention {heads = 2, dropout = p},\n"
        "    nn.Linear {name = 'c_proj', ['in'] = 8, out = 8}}\n"
        "  local x, dout = ds.tensor('fp32', B, T, 8), ds.tensor('fp32', B, T, 8)\n"
        "  for i = 1, B * T * 8 do x:set(i, math.sin(i * 0.37)); dout:set(i, math.cos(i * 0.11)) end\n"
        "  s:zero_grad()\n"
        "  local m0 = ds.memory()\n"
        "  ds.memory_reset_peaks()\n"
        "  s:forward(x, true, 4, 1, 0)\n"
        "  local kept = ds.memory().activations.current - m0.activations.current\n"
        "  s:backward(dout)\n"
        "  local m1 = ds.memory()\n"
        "  s:release()\n"
        "  return kept, m1.activations.peak - m0.activations.current,\n"
        "         m1.workspace.peak - m0.workspace.current\n"
        "end\n"
        "local k0, a0, w0 = held(0)\n"
        "local k1, a1, w1 = held(0.3)\n"
        "assert(k1 == k0, string.format('kept %d bytes with dropout, %d without', k1, k0))\n"
        "assert(a1 == a0, string.format('activation peak %d with dropout, %d without', a1, a0))\n"
        "assert(w1 == w0, string.format('workspace peak %d with dropout, %d without', w1, w0))\n"
        "assert(k1 < B * 2 * T * T * 4, string.format('kept %d bytes: O(T^2)', k1))\n");
}

/* Export writes Hugging Face names and layouts (Conv1D weights [in, out], no lm_head);
 * loading that file into a differently initialised model reproduces every weight. */
static void test_safetensors_round_trip(void **state) {
    (void)state;
    run_chunk(
        "local path = os.tmpname()\n"
        "local cfg = {vocab=13, context=6, layers=2, heads=2, d=8}\n"
        "local a = gpt.GPT(cfg, {seed = 1})\n"
        "gpt.save_safetensors(a, path)\n"
        "local f = ds.safetensors.load(path)\n"
        "assert(f['transformer.wte.weight'] and not f['lm_head.weight'] and not f['transformer.lm_head.weight'])\n"
        "local w = f['transformer.h.1.attn.c_attn.weight']\n"
        "assert(w:size(1) == 8 and w:size(2) == 24, 'c_attn.weight must be stored [in, out]')\n"
        "local ours = a:param('h.1.attn.c_attn.weight')\n"
        "assert(w:get(1 * 24 + 5 + 1) == ours:get(5 * 8 + 1 + 1), 'c_attn.weight not transposed')\n"
        "local n = 0; for _ in pairs(f) do n = n + 1 end\n"
        "assert(n == 4 + 2 * 12, 'tensor count ' .. n)\n"
        "local b = gpt.GPT(cfg, {seed = 2})\n"
        "gpt.load_safetensors(b, path)\n"
        "same(flat(a, 'params'), flat(b, 'params'), 'weights after the round trip')\n"
        "local c = gpt.GPT({vocab=13, context=6, layers=2, heads=2, d=16}, {seed = 2})\n"
        "local ok, err = pcall(gpt.load_safetensors, c, path)\n"
        "assert(not ok and err:find('the model needs'), 'shape mismatch not refused: ' .. tostring(err))\n"
        "os.remove(path)\n");
}

/* 16-bit stages hold bf16/fp16 views; weights move between precisions through
 * safetensors (rounded to nearest even on the way down, exact on the way up), and Lua reads
 * and writes 16-bit tensors as numbers. */
static void test_half_precision_weights(void **state) {
    (void)state;
    run_chunk(
        "local t = ds.tensor('bf16', 3)\n"
        "t:set(1, 1 + 2^-8); t:set(2, 1 + 3 * 2^-8); t:set(3, 1e39)\n"
        "assert(t:get(1) == 1 and t:get(2) == 1 + 2^-6, 'bf16 rounds to nearest even')\n"
        "assert(t:get(3) == math.huge, 'bf16 overflow is inf')\n"
        "local h = ds.tensor('fp16', 3); h:copy(t)\n"
        "assert(h:get(1) == 1 and h:get(3) == math.huge, 'bf16 -> fp16 copy')\n"
        "local f = ds.tensor('fp32', 3); f:copy(h)\n"
        "assert(f:get(2) == 1 + 2^-6, 'fp16 -> fp32 copy is exact')\n"
        "local path, path16 = os.tmpname(), os.tmpname()\n"
        "local cfg = {vocab=13, context=6, layers=2, heads=2, d=8}\n"
        "local a = gpt.GPT(cfg, {seed = 1})\n"
        "gpt.save_safetensors(a, path)\n"
        "local b = gpt.GPT(cfg, {seed = 2, embed = {precision = 'bf16'}, blocks = {precision = 'bf16'},\n"
        "                        head = {precision = 'bf16'}})\n"
        "gpt.load_safetensors(b, path)\n"
        "local pa, pb = a:param('h.1.mlp.c_fc.weight'), b:param('h.1.mlp.c_fc.weight')\n"
        "assert(pb:dtype() == 'bf16', 'a bf16 stage views its parameters as bf16')\n"
        "for i = 1, pa:numel() do\n"
        "  local x, y = pa:get(i), pb:get(i)\n"
        "  assert(math.abs(x - y) <= 2^-8 * math.abs(x), 'element ' .. i .. ': ' .. y .. ' is not ' .. x .. ' rounded')\n"
        "end\n"
        "gpt.save_safetensors(b, path16)\n"
        "assert(ds.safetensors.load(path16)['transformer.wte.weight']:dtype() == 'bf16')\n"
        "local c = gpt.GPT(cfg, {seed = 3})\n"
        "gpt.load_safetensors(c, path16)\n"
        "local pc = c:param('h.1.mlp.c_fc.weight')\n"
        "for i = 1, pb:numel() do assert(pc:get(i) == pb:get(i), 'widening is exact') end\n"
        "os.remove(path); os.remove(path16)\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint_is_exact_and_saves_memory),
        cmocka_unit_test(test_criterion_backward_in_place),
        cmocka_unit_test(test_runs_are_deterministic),
        cmocka_unit_test(test_flat_layout_and_parameter_table),
        cmocka_unit_test(test_optimizer_ranges_and_decay),
        cmocka_unit_test(test_accumulation_clipping_schedules),
        cmocka_unit_test(test_job_gradient_clipping),
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_dropout_backward_uses_forward_mask),
        cmocka_unit_test(test_attention_dropout),
        cmocka_unit_test(test_attention_dropout_gradient),
        cmocka_unit_test(test_attention_dropout_memory),
        cmocka_unit_test(test_job_training_settings),
        cmocka_unit_test(test_safetensors_round_trip),
        cmocka_unit_test(test_half_precision_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
