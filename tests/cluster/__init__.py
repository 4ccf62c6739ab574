"""Specs for `fr_analyzer.cluster`: the ranks read on a Ray cluster give one process's report."""
