#!/bin/sh
# Captures what a GPU node reports, for the telemetry parsers' tests: nvidia-smi's query
# loop and compute-apps list, `nvidia-smi -q`, and NVML through nvidia-ml-py, idle and while
# trainer/elastic_ddp.py trains on every GPU under torchrun.
#   sh bench/gpu/capture.sh OUT_DIR
set -u
out=${1:?usage: gpu_capture.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
q=index,uuid,name,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu
ngpu=$(nvidia-smi --list-gpus | wc -l)

nvidia-smi -q > "$out/nvidia_smi_q.txt" 2>&1
nvidia-smi --query-gpu=$q --format=csv,noheader,nounits > "$out/query_idle.csv" 2>&1
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits \
    > "$out/apps_idle.csv" 2>&1
"$py" bench/gpu/nvml_snapshot.py > "$out/nvml_idle.json" 2>&1

"$py" -m torch.distributed.run --standalone --nproc-per-node "$ngpu" \
    trainer/elastic_ddp.py --steps 12000 > "$out/train.log" 2>&1 &
train=$!
sleep 12
timeout 4 nvidia-smi --query-gpu=$q --format=csv,noheader,nounits -lms 500 \
    > "$out/query_busy_lms.csv" 2>&1
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits \
    > "$out/apps_busy.csv" 2>&1
"$py" bench/gpu/nvml_snapshot.py > "$out/nvml_busy.json" 2>&1
ps -eo pid,ppid,args | grep -v grep | grep -E "elastic_ddp|torch.distributed.run" \
    > "$out/ps_busy.txt"
for p in $(awk '{print $1}' "$out/ps_busy.txt"); do
    printf '%s %s\n' "$p" "$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null \
        | grep -E '^(LOCAL_RANK|RANK|CUDA_VISIBLE_DEVICES)=' | tr '\n' ' ')"
done > "$out/env_busy.txt"
wait $train
echo "train exit $?" >> "$out/train.log"
nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits \
    > "$out/apps_after.csv" 2>&1
ls -l "$out"
