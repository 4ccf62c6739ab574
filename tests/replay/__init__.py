"""Specs for `fr_analyzer.replay`: the recorded collectives run again."""
