"""Specs for `fr_analyzer.load`: files into the model; its wings have a folder each."""
