"""Refuse a fit whose arrays cannot fit in memory, before allocating them.

A generated ``_prepare`` states the float64 arrays it is about to allocate, by shape
(``cemodel.codegen.memory``); ``check_memory`` adds them up with the sizes bound from the data,
``dims`` and ``--set`` and, when that is more than the machine's physical memory, raises a
``CemDataError`` naming the dimension that makes the largest array large, its size and the
memory needed (``--set K=1e12``: 15 TiB), instead of a MemoryError (or numpy's ValueError past
its largest shape) from inside ``_prepare``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from ..errors import CemDataError
from .binding import BoundData
from .driver import max_length, share_count

__all__ = ["check_memory", "describe_bytes", "physical_memory"]

FLOAT_BYTES = 8


def physical_memory() -> int | None:
    """This machine's physical memory in bytes, or None where the system does not say."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * size if pages > 0 and size > 0 else None


def describe_bytes(count: int | float) -> str:
    """``7.3 TiB``."""
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{float(count):.1e} bytes"


def _size(bound: BoundData, entry: str | int) -> int:
    if isinstance(entry, int):
        return entry
    if entry == "threads":
        return share_count(bound)
    if entry.startswith("len("):
        return int(bound.n_items[entry[4:-1]])
    if entry.startswith("max("):
        return max_length(bound.arrays[f"{entry[4:-1]}_ptr"])
    return int(bound.dims[entry])


def check_memory(bound: BoundData, arrays: Mapping[tuple, int],
                 limit: int | None = None) -> None:
    """Refuse ``arrays`` ({shape: how many float64 arrays of it}) when together they need more
    than ``limit`` bytes (default: the machine's physical memory)."""
    limit = physical_memory() if limit is None else limit
    if limit is None:
        return
    sized = {shape: [_size(bound, entry) for entry in shape] for shape in arrays}
    need = {shape: count * math.prod(sized[shape]) * FLOAT_BYTES
            for shape, count in arrays.items()}
    total = sum(need.values())
    if total <= limit:
        return
    largest = max(need, key=need.__getitem__)
    entry, size = max(zip(largest, sized[largest], strict=True), key=lambda pair: pair[1])
    shape = ", ".join(f"{s:,}" for s in sized[largest])
    raise CemDataError(
        f"{_what(entry, size)}: the model's arrays would need {describe_bytes(total)} (those "
        f"of shape ({shape}) alone {describe_bytes(need[largest])}), more than this "
        f"machine's memory ({describe_bytes(limit)})",
        hint="a size given with --set or dims=, in the model file (dim), or implied by the "
             "data is far larger than intended")


def _what(entry: str | int, size: int) -> str:
    if isinstance(entry, int):
        return f"a literal size of {size:,}"
    if entry == "threads":
        return f"{size} threads each keep their own statistics"
    if entry.startswith(("len(", "max(")):
        rows = "elements" if entry.startswith("len(") else "elements in its longest row"
        return f"plate '{entry[4:-1]}' has {size:,} {rows}"
    return f"dimension '{entry}' is {size:,}"
