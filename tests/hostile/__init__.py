"""Hostile and messy input across every stage: nothing crashes, nothing runs, nothing is lost."""
