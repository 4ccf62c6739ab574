"""The project's shape: the package layout, the README and docs, `make run`."""
