"""The safety wing of `load`: the only door from bytes to objects, its limits and its sandbox.

Safety-critical (its README.md says what a change here must show). `door` is where bytes become
objects: a pickle through the unpickler that refuses every global, JSON through the one parser,
and dumps laid out the way their writer lays them out decoded straight into columns by the
`decoders` (a grammar of plain values, read by one exact stack machine: they too turn bytes into
values, so they live behind the door, not among the formats). `reading` reads one file within
the limits (regular files only, bounded gzip) and scans a pickle's opcodes for bombs; `sandbox`
runs the reading in worker processes that a hostile file can only kill; `limits` is the one
table of every limit.
"""
