#!/bin/sh
# The straggler run on the GPU machine, each part under its own time limit so the whole fits
# one device call (about 8 minutes):
#   1. who the console names, live, on 2 GPUs and (where there are 4) on 4: rank 1 computes
#      40% longer a step (bench/gpu/straggler.py; its balanced twin must name nobody);
#   2. what the collective sampler costs the workers (bench/straggler/cost.py, NCCL,
#      interleaved on/off, 3 runs each);
#   3. NVRx's own detector beside ddptui's on the same job (bench/gpu/nvrx_side_by_side.py:
#      its wheel nvidia_resiliency_ext-0.7.0-*cp312*.whl and its dependencies in $WHEELS or
#      .device-wheels/, installed first without network).
#   sh bench/gpu/straggler.sh OUT_DIR
set -u
out=${1:?usage: straggler.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
nvidia-smi -L > "$out/gpus.txt" 2>&1
gpus=$(grep -c '^GPU' "$out/gpus.txt")
slow="--steps 100 --step-s 0.2 --extra-s 0.08"
timeout 110 "$py" bench/gpu/straggler.py "$out/nproc2" --nproc 2 $slow 2>&1 \
    | tee "$out/straggler_summary_2.txt"
if [ "$gpus" -ge 4 ]; then
    timeout 110 "$py" bench/gpu/straggler.py "$out/nproc4" --nproc 4 $slow 2>&1 \
        | tee "$out/straggler_summary_4.txt"
fi
timeout 120 "$py" -m bench.straggler.cost --reps 3 --steps 2000 --nproc 2 --width 4096 \
    2>&1 | tee "$out/straggler_cost.txt"
wheels=${WHEELS:-.device-wheels}
wheel=$(ls "$wheels"/nvidia_resiliency_ext-0.7.0-*cp312*.whl 2>/dev/null | head -1)
if [ -n "$wheel" ]; then
    timeout 60 "$py" -m pip install --no-index --find-links "$wheels" "$wheel" \
        > "$out/nvrx_install.txt" 2>&1 || echo "NVRx wheel did not install: see nvrx_install.txt"
else
    echo "no nvidia_resiliency_ext-0.7.0 wheel in $wheels: the NVRx column says so"
fi
timeout 150 "$py" bench/gpu/nvrx_side_by_side.py "$out" --nproc 2 --steps 200 \
    --cost "$(grep "step time on/off" "$out/straggler_cost.txt")" 2>&1 | tee "$out/nvrx_side_by_side.txt"
ls -lR "$out"
