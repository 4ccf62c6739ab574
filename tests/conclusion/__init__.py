"""Specs for `fr_analyzer.conclusion`: the one answer, and how sure it is (dating the dumps)."""
