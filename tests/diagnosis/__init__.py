"""Specs for `fr_analyzer.diagnosis`: who waits for whom, and the root-cause rules."""
