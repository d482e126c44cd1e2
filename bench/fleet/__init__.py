"""Provides the fleet benchmark: hundreds of testbed hosts launched and torn down (`fleet`), the
console run on every host (`console_run`) and the report (`report`)."""
