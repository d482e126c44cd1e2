"""The story of a run: its incidents, in order, the one account every surface reads."""
