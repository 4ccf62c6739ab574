"""Specs for `fr_analyzer.model`: the entry table, records and catalogs."""
