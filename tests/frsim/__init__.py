"""Specs for the recorder simulator (tools/frsim) and its fault campaign."""
