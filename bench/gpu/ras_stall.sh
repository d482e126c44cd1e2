#!/usr/bin/env bash
# Provides the GPU evidence for "why is it wrong": the skipped all_reduce on NCCL held as one
# stall for 3 minutes, NCCL RAS's answer folded into its verdict, and the size mismatch.
#
# On a machine with 2 NVIDIA GPUs, torch with CUDA and NCCL >= 2.28 (RAS on: the default),
# from the repository's root, no network needed:
#     OUT=/some/dir bash bench/gpu/ras_stall.sh
# Writes into $OUT:
#   env.txt                  torch, CUDA, NCCL versions, nvidia-smi -L
#   stall.jsonl              `ddptui run --headless --hang-timeout 20` of trainer/hang.py
#                            --skip-rank 1: the console's events for 200 s after the stall,
#                            then its teardown (SIGINT) and summary
#   stall_node.log           the node's log of that run
#   ras_direct_1.txt, _2.txt NCCL RAS asked directly (ncclras, else its port) 5 s apart while
#                            the job stood still: the raw text the parser reads
#   mismatch.jsonl           trainer/mismatch.py (rank 1 all-reduces twice the size from
#                            step 5) for 90 s, then SIGINT: the audit's mismatch events
#   summary.txt              what the runs said, checked: one stall, one stacks event, no
#                            "progress again", a `ras` event with the nodes' lines, the
#                            stall's verdict naming rank 1 with NCCL RAS evidence lines, and
#                            the mismatch (once collective records reach the console: today
#                            the dumps come at a stall, a watchdog timeout or a failure only,
#                            so a mismatch NCCL lets run on waits for the live channel)
set -u
OUT="${OUT:?set OUT to the directory the results go to}"
mkdir -p "$OUT"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-python3}"
STATE="$(mktemp -d /tmp/ddptui-ras-XXXXXX)"
export DDPTUI_STATE_DIR="$STATE" PYTHONPATH="$ROOT"
cd "$STATE"

{
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())'
  nvidia-smi -L 2>&1 || true
  command -v ncclras || echo "ncclras: not on PATH (the client port is asked)"
} > "$OUT/env.txt" 2>&1

ask_ras() {  # the node-side client ddptui itself sends to the nodes
  "$PY" -S -c "import sys;exec(compile(sys.stdin.buffer.read(),'<ras>','exec'))" \
    ras "${NCCL_RAS_ADDR:-localhost:28028}" 5 < "$ROOT/ddptui/core/node/ras_query.py" |
    "$PY" -c 'import json,sys; a=json.loads(sys.stdin.read()); print(a.get("text") or a)'
}

# 1. the stall, held
"$PY" -m ddptui.cli run --headless --nodes 1 --nproc-per-node 2 --hang-timeout 20 \
  "$ROOT/trainer/hang.py" --skip-rank 1 --steps 5 > "$OUT/stall.jsonl" 2> "$OUT/stall.err" &
PID=$!
for _ in $(seq 1 240); do
  grep -q '"event": "stall"' "$OUT/stall.jsonl" 2>/dev/null && break
  sleep 1
done
sleep 30
ask_ras > "$OUT/ras_direct_1.txt" 2>&1
sleep 5
ask_ras > "$OUT/ras_direct_2.txt" 2>&1
sleep 170
kill -INT "$PID"
wait "$PID"
cp "$STATE"/runs/*/nodes/*.log "$OUT/stall_node.log" 2>/dev/null || true

# 2. the size mismatch (NCCL says nothing; the audit must)
timeout -s INT 90 "$PY" -m ddptui.cli run --headless --nodes 1 --nproc-per-node 2 \
  "$ROOT/trainer/mismatch.py" --steps 100000 --sleep 0.1 > "$OUT/mismatch.jsonl" \
  2> "$OUT/mismatch.err"

"$PY" - "$OUT" <<'PYEOF' | tee "$OUT/summary.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
ev = [json.loads(l) for l in (out / "stall.jsonl").read_text().splitlines() if l.startswith("{")]
kinds = [e["event"] for e in ev]
stalls = [e for e in ev if e["event"] == "stall"]
first = stalls[0]["ts"] if stalls else None
back = [e for e in ev if e["event"] == "rank" and first and e["ts"] > first
        and (e["state"] == "running" or e["detail"] == "progress again")]
ras = [e for e in ev if e["event"] == "ras"]
verdicts = [e for e in ev if e["event"] == "verdict"]
print("stalls said without stacks (want 1):", sum(1 for e in stalls if not e["groups"]))
print("stacks events (want 1):", kinds.count("stacks"))
print("ranks back to running after the stall (want 0):", len(back))
print("every stall event has ts:", all("ts" in e for e in stalls))
print("ras events:", json.dumps(ras, indent=1)[:3000])
print("verdicts:", json.dumps(verdicts[-1:], indent=1)[:3000])
mm = [json.loads(l) for l in (out / "mismatch.jsonl").read_text().splitlines() if l.startswith("{")]
found = [e for e in mm if e["event"] == "mismatch"]
steps = [e for e in mm if e["event"] == "line" and "step=5" in e.get("text", "")]
print("mismatch events:", json.dumps(found[:2], indent=1)[:2000])
if found and steps:
    print("mismatch said", round(found[0]["ts"] - steps[0]["ts"], 1), "s after step 5")
PYEOF
rm -rf "$STATE"
