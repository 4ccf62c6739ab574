"""Specs for `fr_analyzer.match`: collectives and send/recv joined across ranks."""
