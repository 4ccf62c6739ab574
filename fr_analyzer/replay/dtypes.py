"""The dtypes a replay allocates: each recorded dtype name (c10's, as Flight Recorder writes
it) as torch's name and width, and, per backend, the same-width stand-in for a dtype the backend
cannot run in an op (gloo has no float8 reduction: "Invalid scalar type"). No torch here: the
plan names dtypes by string and the worker looks them up. The dtypes themselves (names, widths)
are the model's one table (`model.dtypes`)."""

from __future__ import annotations

from ..model.dtypes import DTYPES

SAME_WIDTH: dict[int, str] = {1: "uint8", 2: "float16", 4: "float32", 8: "float64"}
"""The stand-in of each width: a type every backend reduces, moves and compares."""

REDUCING_OPS = frozenset({"all_reduce", "reduce", "reduce_scatter"})
"""Op kinds that add elements up: where a backend's dtype support is narrowest."""

SUPPORTED: dict[str, frozenset[str]] = {
    # ProcessGroupGloo's type switch (GENERATE_ALL_TYPES): the rest fail "Invalid scalar type"
    "gloo": frozenset(
        {"float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64"}
    ),
}
"""Per backend, the dtypes it runs every op in; a backend not listed runs every dtype but
float8 in a reduction (`NO_FLOAT8_REDUCTION`)."""

NO_FLOAT8_REDUCTION = frozenset(name for name, d in DTYPES.items() if name.startswith("Float8"))


def replay_dtype(recorded: str, backend: str, kind: str) -> tuple[str, int]:
    """The torch dtype name to allocate for a `recorded` dtype in an op of `kind` on `backend`,
    and by how much to multiply the element count (a 16-byte complex becomes two float64s).
    An unknown name is taken as float32 of its recorded count."""
    known = DTYPES.get(recorded)
    if known is None:
        return "float32", 1
    supported = SUPPORTED.get(backend)
    if supported is not None:
        if known.torch_name in supported:
            return known.torch_name, 1
    elif not (recorded in NO_FLOAT8_REDUCTION and kind in REDUCING_OPS):
        return known.torch_name, 1
    if known.width in SAME_WIDTH:
        return SAME_WIDTH[known.width], 1
    return "float64", known.width // 8
