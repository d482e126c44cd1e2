#!/bin/sh
# Captures the GPU-only failure patterns (NCCL watchdog timeout, CUDA OOM) on a 2-GPU host,
# running torchrun the way ddptui's plan does. Usage: gpu_capture.sh OUTDIR
out=${1:-.}
here=$(dirname "$0")
export PYTHONUNBUFFERED=1 LOGLEVEL=INFO
export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[ddptui:${rank}:${local_rank}]:'
python3 -c "import torch; print(torch.__version__, torch.cuda.device_count())"
timeout 150 python3 -m torch.distributed.run --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:29511 \
  --tee=3 "$here/nccl_timeout.py" 1 > "$out/nccl_timeout.log" 2>&1
echo "nccl exit $?"
timeout 150 python3 -m torch.distributed.run --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:29512 \
  --tee=3 "$here/cuda_oom.py" 1 > "$out/cuda_oom.log" 2>&1
echo "oom exit $?"
