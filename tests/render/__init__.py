"""Specs for `fr_analyzer.render`: every output the one analysis result renders to."""
