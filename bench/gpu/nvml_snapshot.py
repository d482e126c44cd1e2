"""Prints one NVML snapshot of every GPU as JSON (nvidia-ml-py), for the parsers' test data."""

from __future__ import annotations

import json

import pynvml  # nvidia-ml-py installs this module name


def _try(fn, *args):
    try:
        return fn(*args)
    except pynvml.NVMLError as err:
        return f"error: {err}"


def main() -> None:
    pynvml.nvmlInit()
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        util = _try(pynvml.nvmlDeviceGetUtilizationRates, h)
        mem = _try(pynvml.nvmlDeviceGetMemoryInfo, h)
        procs = _try(pynvml.nvmlDeviceGetComputeRunningProcesses, h)
        ecc = _try(
            pynvml.nvmlDeviceGetTotalEccErrors,
            h,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        gpus.append(
            {
                "index": i,
                "uuid": _try(pynvml.nvmlDeviceGetUUID, h),
                "name": _try(pynvml.nvmlDeviceGetName, h),
                "util": getattr(util, "gpu", util),
                "mem_used": getattr(mem, "used", mem),
                "mem_total": getattr(mem, "total", mem),
                "power_mw": _try(pynvml.nvmlDeviceGetPowerUsage, h),
                "temp_c": _try(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
                "ecc_uncorrected_volatile": ecc,
                "procs": [
                    {"pid": p.pid, "used_memory": p.usedGpuMemory}
                    for p in (procs if isinstance(procs, list) else [])
                ],
            }
        )
    print(
        json.dumps(
            {
                "driver": _try(pynvml.nvmlSystemGetDriverVersion),
                "cuda_driver": _try(pynvml.nvmlSystemGetCudaDriverVersion),
                "gpus": gpus,
            },
            indent=1,
        )
    )
    pynvml.nvmlShutdown()


if __name__ == "__main__":
    main()
