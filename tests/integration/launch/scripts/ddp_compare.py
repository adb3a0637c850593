"""ddp_compare.py REF_DIR OUT_DIR WORLD: every rank's all-reduced gradients, step by step,
and the final loss equal the single-process run's (within float64 rounding: the sums run
in another order), and the ranks agree with each other exactly."""
import json
import math
import sys

ref_dir, out_dir, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
ref = json.load(open(f"{ref_dir}/rank-0.json"))
runs = [json.load(open(f"{out_dir}/rank-{r}.json")) for r in range(world)]
bad = []
for r, run in enumerate(runs):
    if run["world"] != world:
        bad.append(f"rank {r}: world {run['world']}, expected {world}")
    if run["grads"] != runs[0]["grads"]:
        bad.append(f"rank {r}: gradients differ from rank 0's (DDP must all-reduce them)")
    for s, (got, want) in enumerate(zip(run["grads"], ref["grads"])):
        for i, (g, w) in enumerate(zip(sum(got, []), sum(want, []))):
            if not math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-12):
                bad.append(f"rank {r} step {s} gradient {i}: {g!r}, single process {w!r}")
                break
    if len(run["grads"]) != len(ref["grads"]):
        bad.append(f"rank {r}: {len(run['grads'])} steps, expected {len(ref['grads'])}")
    if not math.isclose(run["loss"], ref["loss"], rel_tol=1e-9):
        bad.append(f"rank {r}: final loss {run['loss']!r}, single process {ref['loss']!r}")
print("\n".join(bad) if bad else f"{world} ranks: gradients and loss equal the single-process run's")
sys.exit(1 if bad else 0)
