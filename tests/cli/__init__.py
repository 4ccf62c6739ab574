"""Specs for `fr_analyzer.cli`: flags, exit codes, one-line errors, misuse."""
