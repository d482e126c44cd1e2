"""Provides the console's screens: the job screen and its modal dialogs."""
