"""The one dtype table: each dtype name a recorder writes (c10's, as Flight Recorder writes it),
with torch's name and width (what a replay allocates) and the element types an Execution Trace
writes for it (`Tensor(float)`, read by `load.formats.traces`). No torch here: names are strings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dtype:
    """A recorded dtype: torch's name for it, its width, and how an Execution Trace names it."""

    torch_name: str  # the attribute of `torch` (torch.float32 is "float32")
    width: int  # bytes per element
    trace_types: tuple[str, ...] = ()  # an Execution Trace's element types for it, if any


DTYPES: dict[str, Dtype] = {
    "Float": Dtype("float32", 4, ("float",)),
    "Double": Dtype("float64", 8, ("double",)),
    "Half": Dtype("float16", 2, ("c10::Half",)),
    "BFloat16": Dtype("bfloat16", 2, ("c10::BFloat16",)),
    "Long": Dtype("int64", 8, ("long int", "int64_t")),
    "Int": Dtype("int32", 4, ("int",)),
    "Short": Dtype("int16", 2, ("short int",)),
    "Char": Dtype("int8", 1, ("signed char",)),
    "Byte": Dtype("uint8", 1, ("unsigned char",)),
    "Bool": Dtype("bool", 1, ("bool",)),
    "UInt16": Dtype("uint16", 2),
    "UInt32": Dtype("uint32", 4),
    "UInt64": Dtype("uint64", 8),
    "Float8_e4m3fn": Dtype("float8_e4m3fn", 1, ("c10::Float8_e4m3fn",)),
    "Float8_e5m2": Dtype("float8_e5m2", 1, ("c10::Float8_e5m2",)),
    "Float8_e4m3fnuz": Dtype("float8_e4m3fnuz", 1, ("c10::Float8_e4m3fnuz",)),
    "Float8_e5m2fnuz": Dtype("float8_e5m2fnuz", 1, ("c10::Float8_e5m2fnuz",)),
    "ComplexHalf": Dtype("complex32", 4),
    "ComplexFloat": Dtype("complex64", 8, ("c10::complex<float>",)),
    "ComplexDouble": Dtype("complex128", 16, ("c10::complex<double>",)),
}
"""Every dtype name a recorder writes that fr-analyze knows (and a replay can allocate)."""

TRACE_DTYPES: dict[str, str] = {
    trace_type: name for name, dtype in DTYPES.items() for trace_type in dtype.trace_types
}
"""An Execution Trace's element type (`c10::BFloat16`) -> the recorder's dtype name."""
