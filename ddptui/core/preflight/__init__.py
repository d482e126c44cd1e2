"""Provides preflight: checks on every node before launch, and the rules that judge them."""
