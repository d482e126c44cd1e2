"""ddptui: the operator console for multi-node PyTorch training."""

__version__ = "0.1.0"
