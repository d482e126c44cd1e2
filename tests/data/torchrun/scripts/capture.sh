#!/bin/sh
# How the CPU captures of this folder were made (run from the repository root, torch 2.13).
# Writes into ${1:-/tmp/captures}; copy what you need next to this script's folder.
set -u
out=${1:-/tmp/captures}
mkdir -p "$out"
here=tests/data/torchrun/scripts
export DDPTUI_STATE_DIR="$out/state"

# Whole runs on two local pseudo-nodes: node logs land in $out/state/runs/<id>/nodes/.
python -m ddptui.cli run --headless trainer/envcheck.py --fail-rank 1 > "$out/errfile.jsonl"
python -m ddptui.cli run --headless "$here/sigkill.py" 1 > "$out/sigkill.jsonl"
python -m ddptui.cli run --headless "$here/gloo_timeout.py" 3 > "$out/gloo.jsonl"

# One agent, started the way the local backend starts it.
agent() {
    log=$1; shift
    PYTHONUNBUFFERED=1 LOGLEVEL=INFO GLOO_SOCKET_IFNAME=lo \
    TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[ddptui:${rank}:${local_rank}]:' \
    timeout 120 torchrun --nnodes=2 --nproc_per_node=2 --rdzv_id=capture --rdzv_backend=c10d \
        --local-addr=127.0.0.1 "$@" --tee=3 trainer/envcheck.py > "$out/$log" 2>&1
}
port=$(python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
agent rdzv_timeout.log --rdzv_endpoint=127.0.0.1:$port --rdzv_conf join_timeout=5
agent rdzv_refused.log --rdzv_endpoint=127.0.0.1:$port \
    --rdzv_conf is_host=false,join_timeout=5,read_timeout=5
python -c "import socket, time; s=socket.socket(); s.bind(('127.0.0.1', 29534)); s.listen(); time.sleep(90)" &
holder=$!
sleep 1
agent port_in_use.log --rdzv_endpoint=127.0.0.1:29534 --rdzv_conf is_host=true,join_timeout=5,read_timeout=5
agent port_in_use_client.log --rdzv_endpoint=127.0.0.1:29534 --rdzv_conf join_timeout=5,read_timeout=5
kill "$holder"
