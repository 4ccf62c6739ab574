"""`python -m fr_analyzer`: the same as the `fr-analyze` command."""

from .cli import main

main()
