"""Provides the SSH backend and its two transports (asyncssh, paramiko)."""
