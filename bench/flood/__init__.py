"""Provides the log flood benchmarks: the core, headless and console tiers under a flood
(`log_flood`, with `core_tier`, `ui_tier`, `rates` and `report`) and the core's ingest in CPU
time (`core_cpu`)."""
