"""The fr-analyze test suite (pytest); builders.py makes synthetic entries and dumps."""
