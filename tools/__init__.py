"""Generators of the sample dump sets and test fixtures, and the frsim simulator; see README.md."""
