"""Provides the Slurm scale benchmark: ddptui's salloc and one step vs srun by hand on many
slurmd nodes (`slurm_scale`)."""
