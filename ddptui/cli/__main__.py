"""Runs `ddptui` as `python -m ddptui.cli`."""

from ddptui.cli.main import main

raise SystemExit(main())
