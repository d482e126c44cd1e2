"""Provides the teardown benchmark: request to every host proven clean over SSH (`teardown`) and
Slurm (`slurm_part`, `slurm_watch`), with the runs' retries and tables (`runs`)."""
