#!/bin/sh
# The straggler run on the GPU machine: who is named (bench/gpu_straggler.py) and what the
# collective sampler costs the workers (bench/straggler_cost.py, NCCL, interleaved on/off).
#   sh bench/gpu_straggler.sh OUT_DIR
set -u
out=${1:?usage: gpu_straggler.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
nvidia-smi -L > "$out/gpus.txt" 2>&1
"$py" bench/gpu_straggler.py "$out" --nproc 2 2>&1 | tee "$out/straggler_summary.txt"
"$py" -m bench.straggler_cost --reps 3 --steps 3000 --nproc 2 --width 4096 \
    2>&1 | tee "$out/straggler_cost.txt"
ls -l "$out"
