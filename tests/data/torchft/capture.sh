#!/bin/sh
# How the captures here were made: torchft's Lighthouse and two replica groups of
# trainer/ft_ddp.py (one torchrun each, gloo, CPU) on this machine; once both step, replica
# group 1's torchrun and worker are killed, and 6 s later it is started again and heals
# from group 0. Run from the repository root: sh tests/data/torchft/capture.sh OUTDIR
# (the committed captures predate the trainer's present line, `ft_G rank R: step=N ...`:
# theirs read `ft replica=G rank=R step=N ...`)
set -u
out=${1:-/tmp/ft-capture}
mkdir -p "$out"
port=29611
torchft_lighthouse --min_replicas 1 --bind "[::]:$port" --join_timeout_ms 2000 \
    >"$out/lighthouse.log" 2>&1 &
lh=$!
export NUM_REPLICA_GROUPS=2 TORCHFT_LIGHTHOUSE="http://localhost:$port"
REPLICA_GROUP_ID=0 torchrun --nnodes 1 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint localhost:29620 --rdzv-id g0 trainer/ft_ddp.py --steps 150 \
    >"$out/group0.log" 2>&1 &
g0=$!
REPLICA_GROUP_ID=1 torchrun --nnodes 1 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint localhost:29621 --rdzv-id g1 trainer/ft_ddp.py --steps 150 \
    >"$out/group1.log" 2>&1 &
g1=$!
until grep -q "ft_1 rank 0: step=10 " "$out/group1.log"; do sleep 0.5; done
curl -s "http://localhost:$port/status" >"$out/status_both.html"
kids=$(cat /proc/"$g1"/task/*/children)
kill -9 "$g1" $kids
sleep 6
curl -s "http://localhost:$port/status" >"$out/status_one.html"
REPLICA_GROUP_ID=1 torchrun --nnodes 1 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint localhost:29621 --rdzv-id g1b trainer/ft_ddp.py --steps 150 \
    >"$out/group1_again.log" 2>&1 &
g1=$!
wait "$g0" "$g1"
curl -s "http://localhost:$port/status" >"$out/status_end.html"
kill "$lh"
