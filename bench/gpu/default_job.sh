#!/bin/sh
# The default job (`ddptui run --headless`, no flags) on 1, 2 and 4 GPUs of this machine, each
# count given by CUDA_VISIBLE_DEVICES: the shape ddptui picks (its notice), the exact commands,
# every rank's line, the exit status and the teardown proof with the GPUs, saved under $OUT.
#   OUT=/tmp/out sh bench/gpu/default_job.sh      (from the repository's root)
# Expected: 1 GPU -> 2 pseudo-nodes x 1 process on the CPU (gloo), the GPU still in the proof;
# 2 GPUs -> 2 x 1, GPU 0 | 1; 4 GPUs -> 2 x 2, GPUs 0,1 | 2,3; every run exit 0, every node
# clean, no GPU held. `summary.txt` has one block per count; `default_N.jsonl` the events.
set -u
out=${OUT:?set OUT to the folder for the results}
mkdir -p "$out"
py=${PYTHON:-python3}
ngpu=$(nvidia-smi --list-gpus 2>/dev/null | grep -c '^GPU ')
state=$(mktemp -d)
summary="$out/summary.txt"
{
    echo "machine: $ngpu GPU(s); $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | tr -s ' ')"
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$summary" 2>&1
for n in 1 2 4; do
    if [ "$n" -gt "$ngpu" ]; then
        echo "== $n GPU(s): skipped, this machine has $ngpu" >> "$summary"
        continue
    fi
    visible=$(seq -s, 0 $((n - 1)))
    start=$(date +%s.%N)
    CUDA_VISIBLE_DEVICES=$visible DDPTUI_STATE_DIR="$state/$n" PYTHONPATH="$PWD" \
        timeout 300 "$py" -m ddptui.cli run --headless --lines \
        > "$out/default_$n.jsonl" 2> "$out/default_$n.stderr"
    code=$?
    end=$(date +%s.%N)
    {
        echo "== $n GPU(s): CUDA_VISIBLE_DEVICES=$visible exit $code ($(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') s)"
        grep '"event": "notice"' "$out/default_$n.jsonl" | head -5
        grep '"event": "allocation"' "$out/default_$n.jsonl" | tail -1
        grep -o 'envcheck host=[^"]*' "$out/default_$n.jsonl"
        grep '"event": "teardown"' "$out/default_$n.jsonl"
        tail -1 "$out/default_$n.jsonl"
        echo "gpu apps after:"
        nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader
    } >> "$summary" 2>&1
done
rm -rf "$state"
cat "$summary"
