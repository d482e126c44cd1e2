"""Provides the launch benchmarks: launch to every rank running (`launch_to_green`), process
start to the first connection (`startup`), one command on many hosts (`fanout`, with its
ddptui side `fanout_worker`), the workers' settings report's cost (`worker_settings`)."""
