#!/bin/sh
# How the elastic captures of this folder were made (run from the repository root, torch 2.13):
# agents of one job with `--nnodes=2:3 --max-restarts=3` on 127.0.0.1, as the local backend
# starts its pseudo-nodes. Usage: capture_elastic.sh OUT [lost|storm] (default: both).
# lost: three agents; node2's agent is stopped (SIGTERM to its process group) mid-run, the
#   other two restart their workers at world size 2 (elastic_lost_node*.log).
# storm: two agents; rank 1 kills itself at step 2 of every attempt: restarts without
#   progress until --max-restarts is spent (elastic_storm_node*.log).
set -u
out=${1:-/tmp/captures}
what=${2:-both}
mkdir -p "$out"
free_port() {
    python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}
agent() {
    log=$1; shift
    PYTHONUNBUFFERED=1 LOGLEVEL=INFO GLOO_SOCKET_IFNAME=lo \
    TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[ddptui:${rank}:${local_rank}]:' \
    setsid timeout 300 torchrun --nnodes=2:3 --nproc_per_node=1 --rdzv_id=elastic$port \
        --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:$port --local-addr=127.0.0.1 \
        --max-restarts=3 --tee=3 "$@" > "$out/$log" 2>&1 &
    echo $! > "$out/$log.pid"  # setsid's timeout leads the agent's process group
}
if [ "$what" != storm ]; then
    port=$(free_port)
    for n in 0 1 2; do
        agent elastic_lost_node$n.log trainer/elastic_ddp.py --steps 30 --step-time 0.4
    done
    sleep 20
    kill -TERM -- -"$(cat "$out/elastic_lost_node2.log.pid")"
    wait
fi
if [ "$what" != lost ]; then
    port=$(free_port)
    for n in 0 1; do
        agent elastic_storm_node$n.log tests/data/torchrun/scripts/sigkill.py 1
    done
    wait
fi
