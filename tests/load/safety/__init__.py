"""Specs for `load.safety`: the door from bytes to objects and the fast decoders."""
