#!/bin/sh
# A graceful stop on the GPU machine: 2 local pseudo-nodes x 1 GPU, each worker holding GPU
# memory; the console torn down with `--stop-signal USR1 --grace 40`; each worker's USR1
# handler checkpoints for 20 s (tests/data/graceful/worker.py). It should show, in
# OUT/verdict.txt: every rank's checkpoint written after ~20 s (USR1 reached the workers past
# torchrun, which would not forward it), no process that "needed SIGKILL" (the torchrun
# agents ended on their own), every node clean with its GPUs' memory returned.
#   sh bench/gpu/graceful_stop.sh OUT_DIR      (needs 2 GPUs; torch with CUDA)
set -u
out=${1:?usage: graceful_stop.sh OUT_DIR}
mkdir -p "$out/ckpt"
py=${PYTHON:-python3}
nvidia-smi -L > "$out/gpus.txt" 2>&1
export DDPTUI_STATE_DIR="$out/state"
"$py" -m ddptui.cli run --headless --backend local --nodes 2 --nproc-per-node 1 \
    --stop-signal USR1 --grace 40 \
    tests/data/graceful/worker.py --ckpt-dir "$out/ckpt" --handler-s 20 --stop-on USR1 --cuda \
    > "$out/events.jsonl" 2> "$out/stderr.txt" &
console=$!
i=0
# both ranks running (a node's "running" comes before its rendezvous)
until [ "$(grep -c '"event": "rank".*"state": "running"' "$out/events.jsonl" 2>/dev/null)" -ge 2 ] ||
    [ $i -ge 120 ]; do
    sleep 1; i=$((i + 1))
done
sleep 5
date +%s > "$out/stop_at.txt"
kill -TERM "$console"
wait "$console"
date +%s > "$out/ended_at.txt"
{
    echo "stop asked at $(cat "$out/stop_at.txt"), console ended at $(cat "$out/ended_at.txt")"
    for f in "$out"/ckpt/*.ckpt; do echo "$f: $(cat "$f")"; done
    grep '"event": "teardown"' "$out/events.jsonl"
    if grep '"event": "teardown"' "$out/events.jsonl" | grep -q "needed SIGKILL"; then
        echo "FAIL: a process needed SIGKILL"
    else
        echo "ok: no process needed SIGKILL"
    fi
} > "$out/verdict.txt"
cat "$out/verdict.txt"
