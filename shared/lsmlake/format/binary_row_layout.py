"""The layout facts of Paimon's BinaryRow that its scalar codec (`binary_row`) and its column encoder
(`binary_row_columns`) share: the size of the header, where short strings live, which types fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from lsmlake.errors import InvalidInputError
from lsmlake.format.types import AnyType, DataType

INLINE_MAX = 7  # strings/binaries up to 7 bytes live inside their slot
INLINE_MARK = 0x80  # byte 7 of an inline slot: 0x80 | length


def null_bits_width(arity: int) -> int:
    """Bytes of the header/null-bit area of a BinaryRow with `arity` fields (8 up to 56 fields)."""
    return ((arity + 63 + 8) // 64) * 8


def atomic_types(types: Sequence[AnyType]) -> list[DataType]:
    out = []
    for i, t in enumerate(types):
        if not isinstance(t, DataType):
            raise InvalidInputError(f"field {i}: {t.sql()} cannot be stored in a BinaryRow "
                                    f"(nested types are never keys or partitions)")
        out.append(t)
    return out
