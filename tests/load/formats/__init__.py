"""Specs for `load.formats`: other recorders' dumps and Execution Traces read as dumps."""
