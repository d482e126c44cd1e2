"""Provides the grid scale benchmark: RankGrid under full updates in the real app (`grid_scale`)."""
