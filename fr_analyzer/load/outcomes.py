"""What the decoders raise when they do not read a file, shared by every reader of the loader."""

from __future__ import annotations


class Outside(Exception):
    """The bytes leave a decoder's grammar: the general path reads the file."""
