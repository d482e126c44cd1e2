"""The backends (local, ssh, slurm); `factory` picks one for a job.

Nothing is imported here: the command line opens the first SSH sockets from
`backends.ssh.early_connect` before the job's models are imported (ddptui/cli/early.py).
"""
