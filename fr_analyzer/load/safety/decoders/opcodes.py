"""The pickle opcodes the decoders and the opcode scan read, shared by them: each one's byte,
taken from `pickletools` by its name (none is typed by hand)."""

from __future__ import annotations

import pickletools

CODES: dict[str, int] = {op.name: op.code.encode("latin-1")[0] for op in pickletools.opcodes}
"""Each opcode's byte, by its `pickletools` name."""

MARK = CODES["MARK"]
STOP = CODES["STOP"]
NONE = CODES["NONE"]
TRUE = CODES["NEWTRUE"]
FALSE = CODES["NEWFALSE"]
BININT1 = CODES["BININT1"]
BININT2 = CODES["BININT2"]
BININT = CODES["BININT"]
LONG1 = CODES["LONG1"]
BINFLOAT = CODES["BINFLOAT"]
BINUNICODE = CODES["BINUNICODE"]
SHORT_BINUNICODE = CODES["SHORT_BINUNICODE"]
EMPTY_LIST = CODES["EMPTY_LIST"]
APPEND = CODES["APPEND"]
APPENDS = CODES["APPENDS"]
EMPTY_DICT = CODES["EMPTY_DICT"]
SETITEM = CODES["SETITEM"]
SETITEMS = CODES["SETITEMS"]
EMPTY_TUPLE = CODES["EMPTY_TUPLE"]
TUPLE1 = CODES["TUPLE1"]
TUPLE2 = CODES["TUPLE2"]
TUPLE3 = CODES["TUPLE3"]
TUPLE = CODES["TUPLE"]
BINGET = CODES["BINGET"]
LONG_BINGET = CODES["LONG_BINGET"]
BINPUT = CODES["BINPUT"]
LONG_BINPUT = CODES["LONG_BINPUT"]
PROTO = CODES["PROTO"]
MEMOIZE = CODES["MEMOIZE"]
FRAME = CODES["FRAME"]
PUTS = (BINPUT, LONG_BINPUT)
"""The memo puts torch's pickler writes."""
