#!/bin/sh
# The straggler run on the GPU machine: who is named (bench/gpu/straggler.py) and what the
# collective sampler costs the workers (bench/straggler/cost.py, NCCL, interleaved on/off).
#   sh bench/gpu/straggler.sh OUT_DIR
set -u
out=${1:?usage: straggler.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
nvidia-smi -L > "$out/gpus.txt" 2>&1
"$py" bench/gpu/straggler.py "$out" --nproc 2 2>&1 | tee "$out/straggler_summary.txt"
"$py" -m bench.straggler.cost --reps 3 --steps 3000 --nproc 2 --width 4096 \
    2>&1 | tee "$out/straggler_cost.txt"
ls -l "$out"
