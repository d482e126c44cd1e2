"""Provides the GPU benchmarks, run on a GPU host: all-reduce and DDP (`ddp`, `raw_allreduce`),
telemetry (`telemetry`, `console_svg`, `capture.sh`, `nvml_snapshot`), the sampler's cost
(`cost`, `sampler_cpu`), preflight (`preflight`) and stalls (`stall`)."""
