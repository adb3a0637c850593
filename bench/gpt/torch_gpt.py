#!/usr/bin/python3
"""The PyTorch peer: the same GPT-2 as the engine's, trained on CPU, timed.

GPT-2 as in the issue: learned position embeddings, pre-LayerNorm blocks (eps 1e-5),
causal multi-head self-attention, tanh-GELU MLP of 4x width, biases everywhere, final
LayerNorm, output head tied to the token embedding; init normal(0, 0.02) with residual
projections scaled by 1/sqrt(2*n_layer); dropout 0; AdamW (betas 0.9/0.95, weight decay
0.1 on matrices only) with gradient clipping at 1.0. Data are random tokens: only speed is
measured. Prints a table, then one JSON object per line per configuration.

Usage: bench/gpt/torch_gpt.py [--model gpt2|small|all] [--threads 2] [--steps 5]
                              [--warmup 2] [--B 4] [--T 64]
Runs with Debian's python3-torch (CPU); /usr/bin/python3 is the interpreter that has it.
"""
import argparse
import ctypes
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = {
    "gpt2-124M": dict(vocab=50257, n_layer=12, n_head=12, n_embd=768),
    "small": dict(vocab=257, n_layer=4, n_head=4, n_embd=256),
}


class SelfAttention(nn.Module):
    def __init__(self, C, n_head, T):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, C, n_head, T):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = SelfAttention(C, n_head, T)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, n_layer, n_head, n_embd, block_size):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif "ln" in name and name.endswith("weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make_optimizer(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8)


def bench(name, cfg, B, T, steps, warmup, threads):
    torch.manual_seed(0)
    model = GPT(block_size=T, **cfg)
    opt = make_optimizer(model)
    params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, cfg["vocab"], (B, T), generator=g)
    tgt = torch.randint(0, cfg["vocab"], (B, T), generator=g)
    times, losses = [], []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if s >= warmup:
            times.append(dt)
    times.sort()
    best, median = times[0], times[len(times) // 2]
    tokens = B * T
    flops = 6.0 * params * tokens + 12.0 * cfg["n_layer"] * cfg["n_embd"] * T * tokens
    row = {
        "bench": "torch_gpt", "model": name, "torch": torch.__version__, "threads": threads,
        "B": B, "T": T, "params": params, "steps": steps,
        "step_ms_best": round(best * 1e3, 2), "step_ms_median": round(median * 1e3, 2),
        "tokens_per_s": round(tokens / best, 2),
        "tokens_per_s_median": round(tokens / median, 2),
        "gflop_per_s": round(flops / best * 1e-9, 2),
        "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4),
    }
    return row


def openblas_core():
    """The OpenBLAS core (kernels) this process runs, or None if torch did not load OpenBLAS."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0", mode=os.RTLD_NOLOAD)
    except OSError:
        return None
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib.openblas_get_corename().decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="all", choices=["all", "gpt2", "gpt2-124M", "small"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--T", type=int, default=64)
    a = ap.parse_args()
    if min(a.threads, a.steps, a.B, a.T) < 1 or a.warmup < 0:
        ap.error("--threads, --steps, --B, --T must be >= 1 and --warmup >= 0")
    torch.set_num_threads(a.threads)
    names = [n for n in MODELS if a.model == "all" or n == a.model
             or (a.model == "gpt2" and n == "gpt2-124M")]
    rows = [bench(n, MODELS[n], a.B, a.T, a.steps, a.warmup, a.threads) for n in names]
    print(f"PyTorch {torch.__version__} CPU, {a.threads} threads, B={a.B} T={a.T}, "
          f"best of {a.steps} steps after {a.warmup} warm-up")
    print(f"{'model':<10} {'params':>11} {'step ms':>9} {'median':>9} {'tokens/s':>9} "
          f"{'GFLOP/s':>8} {'loss':>15}")
    for r in rows:
        print(f"{r['model']:<10} {r['params']:>11} {r['step_ms_best']:>9.1f} "
              f"{r['step_ms_median']:>9.1f} {r['tokens_per_s']:>9.1f} {r['gflop_per_s']:>8.1f} "
              f"{r['loss_first']:>7.3f}->{r['loss_last']:<7.3f}")
    core = openblas_core()
    print(f"OpenBLAS kernels: {core or 'none (torch did not load OpenBLAS)'}")
    for r in rows:
        r["blas_core"] = core
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
