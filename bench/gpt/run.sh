#!/bin/sh
# The training benchmark, all three peers on the same machine, shapes and threads:
#   1. OpenBLAS sgemm on the model's own GEMM shapes (bench/kernels: the ceiling),
#   2. the engine (bench/gpt/bench_engine.lua under `dsrun run`),
#   3. the same GPT-2 in PyTorch on CPU (bench/gpt/torch_gpt.py, Debian's python3-torch),
# then a comparison table and one JSON object per model ("bench":"gpt_compare").
# usage: bench/gpt/run.sh [BUILD_DIR]     (default: ./build)
# env:   THREADS=2 B=4 T=64 STEPS=5 WARMUP=2 MODEL=all (all | gpt2 | small)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
THREADS=${THREADS:-2} B=${B:-4} T=${T:-64} STEPS=${STEPS:-5} WARMUP=${WARMUP:-2} MODEL=${MODEL:-all}
# libgomp's idle threads spin by default and starve OpenBLAS's pthreads on the same cores
# (docs/engine.md, "Threads"); PASSIVE for all three peers alike, unless set already.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# OpenBLAS's kernels (its core) set the GEMM speed of all three peers; they share this
# environment, so they run the same core. It is printed, not changed: a site may pin one.
blas_core=$("$build/runtime/dsrun" --blas | sed -n 's/^core //p')
echo "threads $THREADS, B=$B, T=$T, OMP_WAIT_POLICY=$OMP_WAIT_POLICY, OpenBLAS core $blas_core, load $(cut -d' ' -f1-3 /proc/loadavg)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== sgemm on the model's GEMM shapes (bench_kernels --only gemm)"
"$build/bench/kernels/bench_kernels" --model "$MODEL" --only gemm --threads "$THREADS" \
    --B "$B" --T "$T" | tee "$out/sgemm.txt"

echo "== engine (dsrun run bench/gpt/bench_engine.lua)"
"$build/runtime/dsrun" run "$here/bench_engine.lua" model="$MODEL" B="$B" T="$T" \
    steps="$STEPS" warmup="$WARMUP" threads="$THREADS" | tee "$out/engine.txt"

echo "== PyTorch (bench/gpt/torch_gpt.py)"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    /usr/bin/python3 "$here/torch_gpt.py" --model "$MODEL" --threads "$THREADS" --B "$B" \
        --T "$T" --steps "$STEPS" --warmup "$WARMUP" | tee "$out/torch.txt"
else
    echo "python3-torch is not installed: no PyTorch figures" | tee "$out/torch.txt"
fi

echo "== comparison"
/usr/bin/python3 - "$out" "$blas_core" <<'PY'
import json, sys, os
rows = {}
for f in ("sgemm.txt", "engine.txt", "torch.txt"):
    for line in open(os.path.join(sys.argv[1], f)):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        rows.setdefault(r.get("model"), {})[r.get("bench")] = r
compare = []
print(f"{'model':<10} {'engine tok/s':>12} {'GFLOP/s':>8} {'sgemm GFLOP/s':>13} {'of sgemm':>9} "
      f"{'torch tok/s':>11} {'vs torch':>9}")
for model, r in sorted(rows.items()):
    e, s, t = r.get("engine"), r.get("sgemm_step"), r.get("torch_gpt")
    if not e:
        continue
    c = {"bench": "gpt_compare", "model": model, "B": e["B"], "T": e["T"], "threads": e["threads"],
         "blas_core": sys.argv[2].split(" (")[0],
         "engine_tokens_per_s": round(e["tokens_per_s"], 2),
         "engine_gflop_per_s": round(e["gflop_per_s"], 2),
         "sgemm_gflop_per_s": s and s["gflop_per_s"],
         "fraction_of_sgemm": s and round(e["gflop_per_s"] / s["gflop_per_s"], 3),
         "torch_tokens_per_s": t and t["tokens_per_s"],
         "speedup_vs_torch": t and round(e["tokens_per_s"] / t["tokens_per_s"], 2)}
    fmt = lambda v, f: (f % v) if v is not None else "-"
    print(f"{model:<10} {c['engine_tokens_per_s']:>12.1f} {c['engine_gflop_per_s']:>8.1f} "
          f"{fmt(c['sgemm_gflop_per_s'], '%.1f'):>13} {fmt(c['fraction_of_sgemm'] and 100 * c['fraction_of_sgemm'], '%.0f%%'):>9} "
          f"{fmt(c['torch_tokens_per_s'], '%.1f'):>11} {fmt(c['speedup_vs_torch'], '%.2fx'):>9}")
    compare.append(c)
for c in compare:
    print(json.dumps(c))
PY
