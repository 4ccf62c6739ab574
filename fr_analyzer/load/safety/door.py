"""The one door where bytes become objects: no other module of the package unpickles or parses.

Three ways through, and no other. The allow-list decoders (`decode_pickle`: `decode` for
torch's pickler, `decode_python` for Python's; `decode_json`) read a dump laid out the way its
writer lays it out straight into columns, from a grammar with no global in it. `parse_json`
and `parse_json_prefix` are Python's `json`, which builds only dicts, lists, strings and
numbers. `unpickle` is the C unpickler with every global, extension and persistent id refused
(`NoGlobalsUnpickler`): the loader runs it in a worker process under limits (`sandbox`), or,
in a process that must survive any file, only after `reading`'s opcode scan found no bomb.
There is no plain `pickle.loads` path: the refusing unpickler reads a 1,024-rank dump set as
fast as `pickle.loads` does (within noise: `benchmarks/README.md`, "One safety door"), so the
scan's reading of a pickle never has to agree with the unpickler's for a file to be safe.

The standard library's functions are bound here when the module is imported, so that a test
can make `pickle.load`, `pickle.loads`, `pickle.Unpickler` and `json.loads` raise everywhere
else and the analysis still runs (`tests/load/safety/test_door.py`).
"""

from __future__ import annotations

import io
import json
import pickle
from typing import TYPE_CHECKING, Any

from ..common import printable
from .decoders.decode import decode_torch
from .decoders.decode_python import decode_python
from .decoders.opcodes import BINPUT, EMPTY_DICT, PROTO

if TYPE_CHECKING:
    from collections.abc import Callable

    from .decoders.columns import Decoded

# Bound once, as `NoGlobalsUnpickler`'s base is: what this module calls is what the interpreter
# had when the package was loaded.
_JSON_LOADS = json.loads
_JSON_PREFIX = json.JSONDecoder().raw_decode
_FRAMED = (bytes((PROTO, 4)), bytes((PROTO, 5)))  # protocols 4 and 5: cut into frames
# Python's pickler in protocol 2 or 3 puts the top-level dict in the memo first (slot 0);
# torch's puts it there last.
_PYTHON_UNFRAMED = tuple(bytes((PROTO, p, EMPTY_DICT, BINPUT)) for p in (2, 3))


class Refused(pickle.UnpicklingError):
    """What the door raises for a global, an extension or a persistent id: the pickle asked
    for something outside builtins, which is refused whatever it is."""


class NoGlobalsUnpickler(pickle.Unpickler):
    """Genuine dumps hold only builtin containers and scalars, so every global (GLOBAL,
    STACK_GLOBAL, INST, OBJ, the EXT opcodes: the C unpickler asks `find_class` for each) and
    every persistent id is refused."""

    def find_class(self, module: str, name: str) -> Any:
        """Refuse the global `module.name`, naming it (printable, cut short)."""
        raise Refused(f"refused to load global {printable(module[:80])}.{printable(name[:80])}")

    def persistent_load(self, pid: Any) -> Any:
        """Refuse every persistent id (PERSID, BINPERSID)."""
        raise Refused("refused persistent id")


def unpickle(data: bytes) -> Any:
    """The object a pickle holds, built by `NoGlobalsUnpickler`; raises what the unpickler
    raises (`pickle.UnpicklingError`, `EOFError`, `ValueError`, ...), for the caller to name.
    Bombs (tuples that take forever to hash, a memo index that allocates gigabytes) are not
    refused here: call it in a sandbox worker, or after `reading.explain_pickle`."""
    stream: io.BytesIO | io.BufferedReader = io.BytesIO(data)
    if data[:2] not in _FRAMED:
        # A buffered stream lets the C unpickler read unframed (protocol 2, torch-written)
        # pickles in big chunks: several times faster than a bare BytesIO. Framed ones are
        # read a frame at a time already, and the buffer only copies them once more.
        stream = io.BufferedReader(stream, buffer_size=1 << 16)
    return NoGlobalsUnpickler(stream).load()


def parse_json(
    text: bytes | str,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """`json.loads(text)`, with `object_pairs_hook` if given; raises what it raises."""
    if object_pairs_hook is None:
        return _JSON_LOADS(text)
    return _JSON_LOADS(text, object_pairs_hook=object_pairs_hook)


def parse_json_prefix(text: str, start: int = 0) -> tuple[Any, int]:
    """The JSON value `text` holds at `start` and where it ends, as an index into `text`
    (`json.JSONDecoder.raw_decode`: no copy of the rest is made, so reading many values one
    after another costs the text once)."""
    return _JSON_PREFIX(text, start)


def decode_pickle(data: bytes) -> Decoded:
    """A pickle decoded straight into columns by the decoder of its pickler's layout (torch
    writes protocol 2; Python's pickler, 2 to 5); `NotDecoded` (`outcomes`) says why not."""
    if data[:2] in _FRAMED or data[:4] in _PYTHON_UNFRAMED:
        return decode_python(data)
    return decode_torch(data)


def decode_json(data: bytes) -> Decoded:
    """JSON in torch's (or Python's `json`) layout decoded straight into columns;
    `NotDecoded` (`outcomes`) says why not."""
    # `decode_json` parses its pieces through this module: imported here, not at the top.
    from .decoders.decode_json import decode_json_layout

    return decode_json_layout(data)
