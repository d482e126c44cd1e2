#!/bin/sh
# The straggler run on the GPU machine: who is named (bench/gpu/straggler.py), what the
# collective sampler costs the workers (bench/straggler/cost.py, NCCL, interleaved on/off),
# NVRx's own detector beside ddptui's on the same job (bench/gpu/nvrx_side_by_side.py: its
# wheel, nvidia_resiliency_ext-0.7.0-*cp312*.whl, in $WHEELS or .device-wheels/, is installed
# first without network), and the console's CPU for scoring 1,024 ranks (bench/straggler/score.py).
#   sh bench/gpu/straggler.sh OUT_DIR
set -u
out=${1:?usage: straggler.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
nvidia-smi -L > "$out/gpus.txt" 2>&1
"$py" bench/gpu/straggler.py "$out" --nproc 2 2>&1 | tee "$out/straggler_summary.txt"
"$py" -m bench.straggler.cost --reps 3 --steps 3000 --nproc 2 --width 4096 \
    2>&1 | tee "$out/straggler_cost.txt"
wheels=${WHEELS:-.device-wheels}
wheel=$(ls "$wheels"/nvidia_resiliency_ext-0.7.0-*cp312*.whl 2>/dev/null | head -1)
if [ -n "$wheel" ]; then
    "$py" -m pip install --no-index --no-deps --find-links "$wheels" "$wheel" \
        > "$out/nvrx_install.txt" 2>&1 || echo "NVRx wheel did not install: see nvrx_install.txt"
else
    echo "no nvidia_resiliency_ext-0.7.0 wheel in $wheels: the NVRx column says so"
fi
"$py" bench/gpu/nvrx_side_by_side.py "$out" --nproc 2 --cost "$(tail -1 "$out/straggler_cost.txt")" \
    2>&1 | tee "$out/nvrx_side_by_side.txt"
"$py" -m bench.straggler.score 2>&1 | tee "$out/straggler_score_cpu.txt"
ls -l "$out"
