"""Whole runs: every sample set's answer and golden report, PyTorch's analyzer's specs."""
