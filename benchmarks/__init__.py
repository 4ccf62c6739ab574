"""Scale benchmark for fr-analyze: a streaming dump generator (`gen`) and a runner (`run`)."""
