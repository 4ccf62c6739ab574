"""The decoders: a dump laid out the way its writer lays it out, read straight into columns.

One reader per format: `decode` (torch's pickler, protocol 2), `decode_python` (Python's
pickler, protocols 2 to 5) and `decode_json` (torch's JSON, or Python's `json`), over what
they share: `opcodes` (each opcode's byte, from `pickletools`), `grammar` (the layout
expressions of both picklers), `machine` (the one exact stack machine, protocols 2 to 5, that
both pickle readers run where their expression does not read) and `columns` (the columns
builder). A file a decoder does not
read raises `outcomes.NotDecoded` with its reason. `safety` is the door they are called through.
"""
