#!/bin/sh
# The training benchmark, all three peers on the same machine, shapes and threads:
#   1. OpenBLAS sgemm on the model's own GEMM shapes (bench/kernels: the ceiling),
#      and the fp32 FMA peak of the same threads (the bound of any fp32 step),
#   2. the engine (bench/gpt/bench_engine.lua under `dsrun run`),
#   3. the same GPT-2 in PyTorch on CPU (bench/gpt/torch_gpt.py, Debian's python3-torch),
# in ROUNDS rounds, then a comparison table and one JSON object per model and round
# ("bench":"gpt_compare_round") and per model over the rounds ("bench":"gpt_compare").
# usage: bench/gpt/run.sh [BUILD_DIR]     (default: ./build)
# env:   THREADS=2 B=4 T=64 STEPS=5 WARMUP=2 MODEL=all (all | gpt2 | small) ROUNDS=3
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
THREADS=${THREADS:-2} B=${B:-4} T=${T:-64} STEPS=${STEPS:-5} WARMUP=${WARMUP:-2} MODEL=${MODEL:-all}
ROUNDS=${ROUNDS:-3}
# dsrun and bench_kernels set PASSIVE themselves (kernels/cpu/cpu_env.c); the export keeps
# PyTorch's libgomp under the same policy, unless one is set already.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# OpenBLAS's kernels (its core) set the GEMM speed of all three peers. dsrun and
# bench_kernels decide the same way which core runs (OpenBLAS's choice, the user's
# OPENBLAS_CORETYPE, or their own when OpenBLAS picked one below the CPU's:
# kernels/cpu/cpu_env.c), and the comparison stops if their figures name different cores;
# PyTorch loads OpenBLAS without that decision, so it is given dsrun's core (and reports the
# one it ran).
blas=$("$build/runtime/dsrun" --blas)
blas_core=$(printf '%s\n' "$blas" | sed -n 's/^core \([A-Za-z0-9_]*\) (.*)$/\1/p')
blas_why=$(printf '%s\n' "$blas" | sed -n 's/^core [A-Za-z0-9_]* (\(.*\))$/\1/p')
[ -n "$blas_core" ] || { echo "no core line in dsrun --blas: $blas" >&2; exit 1; }
echo "threads $THREADS, B=$B, T=$T, OMP_WAIT_POLICY=$OMP_WAIT_POLICY, OpenBLAS core $blas_core ($blas_why), load $(cut -d' ' -f1-3 /proc/loadavg)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
have_torch=0
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then have_torch=1; fi

# The peers run in rounds, each round all three one after the other, so that a ratio is
# taken between runs seconds apart: on a shared machine the speed drifts by tens of
# percent over minutes, more than the differences being measured.
for r in $(seq 1 "$ROUNDS"); do
    d="$out/round-$r"
    mkdir -p "$d"
    echo "== round $r of $ROUNDS: sgemm on the model's GEMM shapes (bench_kernels --only gemm)"
    "$build/bench/kernels/bench_kernels" --model "$MODEL" --only gemm --threads "$THREADS" \
        --B "$B" --T "$T" | tee "$d/sgemm.txt" | grep -v '^{' | grep -E "step's GEMMs|at the fp32 FMA peak" || true
    echo "== round $r: engine (dsrun run bench/gpt/bench_engine.lua)"
    "$build/runtime/dsrun" run "$here/bench_engine.lua" model="$MODEL" B="$B" T="$T" \
        steps="$STEPS" warmup="$WARMUP" threads="$THREADS" | tee "$d/engine.txt" | grep -v '^{'
    echo "== round $r: PyTorch (bench/gpt/torch_gpt.py)"
    if [ "$have_torch" = 1 ]; then
        OPENBLAS_CORETYPE="$blas_core" /usr/bin/python3 "$here/torch_gpt.py" --model "$MODEL" \
            --threads "$THREADS" --B "$B" --T "$T" --steps "$STEPS" --warmup "$WARMUP" |
            tee "$d/torch.txt" | grep -v '^{'
    else
        echo "python3-torch is not installed: no PyTorch figures" | tee "$d/torch.txt"
    fi
done

echo "== comparison"
/usr/bin/python3 - "$out" "$ROUNDS" <<'PY'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def load(r):
    rows = {}
    for f in ("sgemm.txt", "engine.txt", "torch.txt"):
        for line in open(os.path.join(out, f"round-{r}", f)):
            if line.startswith("{"):
                j = json.loads(line)
                rows.setdefault(j.get("model"), {})[j.get("bench")] = j
    return rows

def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None

per_model = {}
loaded = [load(r) for r in range(1, rounds + 1)]
# A busy neighbour can only pull the measured peak down, so the bound uses the highest.
peak = max((x["sgemm_step"].get("fma_peak_gflop_per_s") or 0 for rows in loaded
            for x in rows.values() if "sgemm_step" in x), default=0) or None
for r, rows in enumerate(loaded, 1):
    for model, x in rows.items():
        e, s, t = x.get("engine"), x.get("sgemm_step"), x.get("torch_gpt")
        if not e:
            continue
        for peer, p in (("sgemm", s), ("PyTorch", t)):
            core = p and p.get("blas_core")  # None: a PyTorch without OpenBLAS
            if core and core != e["blas_core"]:
                sys.exit(f"round {r}, {model}: {peer} ran OpenBLAS core {core}, "
                         f"the engine {e['blas_core']}: not comparable")
        c = {"bench": "gpt_compare_round", "round": r, "model": model, "B": e["B"], "T": e["T"],
             "threads": e["threads"], "blas_core": e["blas_core"],
             "engine_tokens_per_s": round(e["tokens_per_s"], 2),
             "engine_gflop_per_s": round(e["gflop_per_s"], 2),
             "sgemm_gflop_per_s": s and s["gflop_per_s"],
             "torch_tokens_per_s": t and t["tokens_per_s"]}
        c["fraction_of_sgemm"] = ratio(c["engine_gflop_per_s"], c["sgemm_gflop_per_s"])
        c["speedup_vs_torch"] = ratio(c["engine_tokens_per_s"], c["torch_tokens_per_s"])
        # The bound of any fp32 step on these cores: its GEMMs at the FMA peak, nothing else.
        c["fma_peak_gflop_per_s"] = peak
        bound = s and peak and s["gemm_gflop"] / peak
        c["bound_tokens_per_s"] = round(e["B"] * e["T"] / bound, 2) if bound else None
        c["bound_vs_torch"] = ratio(c["bound_tokens_per_s"], c["torch_tokens_per_s"])
        per_model.setdefault(model, []).append(c)

fmt = lambda v, f: (f % v) if v is not None else "-"
def stats(vals):
    """median, min, max of the values that exist, or Nones"""
    vals = [v for v in vals if v is not None]
    return (statistics.median(vals), min(vals), max(vals)) if vals else (None, None, None)

def span(st, f, scale=1):
    med, lo, hi = st
    if med is None:
        return "-"
    return f % (scale * med) + (f" ({f % (scale * lo)}-{f % (scale * hi)})" if lo != hi else "")

print(f"best of {rounds} round(s) per peer; ratios: median of the rounds' (range); "
      "bound: a step of nothing but its GEMMs at the fp32 FMA peak (the highest measured), "
      "against PyTorch's best round")
print(f"{'model':<10} {'engine tok/s':>12} {'GFLOP/s':>8} {'sgemm GFLOP/s':>13} {'torch tok/s':>11}   "
      f"{'engine / sgemm':<22} {'engine / torch':<22} {'bound / torch':<22}")
summary = []
for model, cs in sorted(per_model.items()):
    best = lambda k: max((c[k] for c in cs if c[k] is not None), default=None)
    fr = stats(c["fraction_of_sgemm"] for c in cs)
    sp = stats(c["speedup_vs_torch"] for c in cs)
    m = {"bench": "gpt_compare", "model": model, "B": cs[0]["B"], "T": cs[0]["T"],
         "threads": cs[0]["threads"], "blas_core": cs[0]["blas_core"], "rounds": len(cs),
         "engine_tokens_per_s": best("engine_tokens_per_s"),
         "engine_gflop_per_s": best("engine_gflop_per_s"),
         "sgemm_gflop_per_s": best("sgemm_gflop_per_s"),
         "torch_tokens_per_s": best("torch_tokens_per_s"),
         "fraction_of_sgemm": fr[0], "fraction_of_sgemm_min": fr[1],
         "fraction_of_sgemm_max": fr[2], "speedup_vs_torch": sp[0],
         "speedup_vs_torch_min": sp[1], "speedup_vs_torch_max": sp[2],
         "fma_peak_gflop_per_s": best("fma_peak_gflop_per_s"),
         "bound_tokens_per_s": best("bound_tokens_per_s")}
    # Against PyTorch's fastest round: the bound is not noisy, and noise only slows a peer.
    m["bound_vs_torch"] = ratio(m["bound_tokens_per_s"], m["torch_tokens_per_s"])
    print(f"{model:<10} {m['engine_tokens_per_s']:>12.1f} {m['engine_gflop_per_s']:>8.1f} "
          f"{fmt(m['sgemm_gflop_per_s'], '%.1f'):>13} {fmt(m['torch_tokens_per_s'], '%.1f'):>11}   "
          f"{span(fr, '%.0f%%', 100):<22} {span(sp, '%.2fx'):<22} {fmt(m['bound_vs_torch'], '%.2fx'):<22}")
    summary.append(m)
for cs in per_model.values():
    for c in cs:
        print(json.dumps(c))
for m in summary:
    print(json.dumps(m))
PY
