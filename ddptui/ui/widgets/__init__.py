"""Provides the console's widgets: job panel, rank grid, node log panes, run outcome."""
