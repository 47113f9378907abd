#!/usr/bin/env bash
# The main job's model (L4 C128 NH4 V257, T 128) at B8, one thread, forward + backward +
# AdamW: ringzero's fp32 and bf16 step against PyTorch's four CPU configurations (eager and
# torch.compile, fp32 and bf16 autocast), ROUNDS alternating rounds (every configuration once
# per round, in turn), then each one's median step time and the ratios issue 29 asks for:
# ringzero fp32 against the fastest PyTorch fp32, ringzero's --precision auto against the
# fastest PyTorch configuration of all.
#   PYTHON=/path/to/venv/bin/python bash bench/peer_main_model.sh [BUILD_DIR] > raw.txt
#   ROUNDS (default 3), STEPS (default 20). PYTHON: a python3 with the newest torch from
#   PyPI (python3 -m venv V && V/bin/pip install torch numpy).
set -euo pipefail
cd "$(dirname "$0")/.."
rz=${1:-build}/ringzero
py=${PYTHON:-python3}
rounds=${ROUNDS:-3}
steps=${STEPS:-20}
cores=$(nproc --all)  # before OMP_NUM_THREADS=1, which nproc would report instead
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$py" -c 'import torch' || { echo "peer_main_model: $py has no torch (set PYTHON)" >&2; exit 1; }
echo "# peer_main_model: $rounds rounds, $steps steps; $cores cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //');" \
     "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -wo 'avx2\|fma\|avx512f\|avx512_bf16\|amx_bf16' | sort -u | tr '\n' ' ')" \
     "torch $("$py" -c 'import torch; print(torch.__version__)')"
shape=(--layers 4 --channels 128 --heads 4 --vocab 257)
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
# What --precision auto resolves to here: the first line of `ringzero memory` names it.
auto=$("$rz" memory --params 1e6 --precision auto 2>/dev/null | head -n 1 | grep -oE '(fp32|bf16)$' || true)
echo "# --precision auto resolves to ${auto:-?} on this CPU"
for round in $(seq 1 "$rounds"); do
  "$rz" bench-step "${shape[@]}" --max-seq 128 --batch 8 --seq 128 --threads 1 --precision fp32,bf16 \
    --steps "$steps" --untimed-steps 2 | grep -E '^\| [a-z0-9]+ \| (fp32|bf16) \|' |
    awk -F'|' '{gsub(/ /, "", $3); gsub(/ /, "", $5); print "ringzero-" $3, $5}'
  for cfg in eager-fp32 eager-bf16 compile-fp32 compile-bf16; do
    flags=()
    [[ $cfg == compile-* ]] && flags+=(--compile)
    [[ $cfg == *-bf16 ]] && flags+=(--bf16)
    ms=$("$py" bench/torch_peer_step.py "${shape[@]}" --seq 128 --batch 8 --threads 1 --steps "$steps" "${flags[@]}" \
           2>/dev/null | grep -oE '"step_ms_median": [0-9.]+' | awk '{print $2}')
    echo "pytorch-$cfg ${ms:?pytorch $cfg failed}"
  done
done | tee "$raw"
python3 - "$raw" "${auto:-fp32}" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, ms = line.split()
    runs.setdefault(who, []).append(float(ms))
med = {k: statistics.median(v) for k, v in runs.items()}
for who in sorted(med):
    v = runs[who]
    print(f"# {who:22s} median {med[who]:8.1f} ms  min {min(v):8.1f}  max {max(v):8.1f}  ({len(v)} runs)")
torch_fp32 = min((m, k) for k, m in med.items() if k.startswith("pytorch") and k.endswith("fp32"))
torch_any = min((m, k) for k, m in med.items() if k.startswith("pytorch"))
if "ringzero-fp32" in med:
    print(f"# ringzero fp32 vs the fastest PyTorch fp32 ({torch_fp32[1]}): {torch_fp32[0] / med['ringzero-fp32']:.2f}x")
auto = "ringzero-" + sys.argv[2]
if auto in med:
    print(f"# ringzero auto (= {sys.argv[2]}) vs the fastest PyTorch ({torch_any[1]}): {torch_any[0] / med[auto]:.2f}x")
PY
