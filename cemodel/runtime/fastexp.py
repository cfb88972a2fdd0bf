"""exp and log without a library call, so that loops over them vectorize.

numba compiles ``math.exp`` to a call into libm, and a loop with a call in it stays scalar
(no SVML in pip's llvmlite). ``exp_nonpositive`` is the textbook reduction
exp(r) = 2^n · exp(f), n = round(r / ln 2), |f| ≤ ln 2 / 2, with exp(f) by its Taylor
polynomial to degree 13 (truncation < 5e-18) and 2^n built in the exponent bits: plain
arithmetic, which LLVM vectorizes (4 doubles per AVX2 instruction). Accurate to 1 ulp
(measured on 2M points of [-750, 0] against libm; tests/test_runtime_special.py).

Its rounding, (x + 1.5·2^52) − 1.5·2^52, must survive the flags of the code it is inlined
into: it does under the generated kernels' fastmath {"reassoc", "contract", "arcp"} (tested),
not under ``fastmath=True``, whose no-signed-zeros lets LLVM fold it (relative error 0.4).

``log_positive`` is the same idea for log y = e·ln 2 + log m, with e and m ∈ [√½, √2) read
from the bits and log m = 2·atanh(s), s = (m − 1)/(m + 1), |s| ≤ 0.1716, by its series to
s²¹ (truncation < 3e-18), arranged as fdlibm's log. Within 1 ulp of libm for normal y
(tested). The digamma of every Dirichlet's E[log x] uses it: a refresh of LDA's K × V topics
took 25–35 ns per entry with libm's log (a scalar call per entry), 5–7 ns with this one.
"""

import numba
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

jit = numba.njit(nogil=True, error_model="numpy", inline="always")

_LOG2E = 1.4426950408889634
# ln 2 = _LN2_HI + _LN2_LO, _LN2_HI with its low 21 bits zero: n·_LN2_HI is exact for |n| < 2^21
_LN2_HI = 0.6931471803691238
_LN2_LO = 1.9082149292705877e-10
# 1.5·2^52: x + _ROUND holds round(x) in its low mantissa bits (|x| < 2^51, round to nearest)
_ROUND = 6755399441055744.0
_ROUND_BITS = 0x4338000000000000
# 2^n is built as 2^(n + 64) · 2^-64, so that n down to -1086 (subnormal results) has an exponent
_BIAS = 1023 + 64
_TWO_M64 = 5.421010862427522e-20
# exp(r) is below half the smallest subnormal here
_SMALLEST = -746.0
_SQRT2 = 1.4142135623730951
_MANTISSA = (1 << 52) - 1
_ONE_BITS = 1023 << 52


@intrinsic
def float_bits(typingctx, x):
    """The IEEE-754 bits of a float64, as an int64 (a reinterpretation, not a conversion)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def bits_float(typingctx, bits):
    """The float64 whose IEEE-754 bits are ``bits`` (the inverse of ``float_bits``)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@jit
def exp_nonpositive(r: float) -> float:
    """exp(r) for r ≤ 0: 0 below -746, subnormal results kept."""
    r = max(r, _SMALLEST)
    shifted = r * _LOG2E + _ROUND  # kept under the kernels' fastmath flags (above)
    n = shifted - _ROUND
    f = (r - n * _LN2_HI) - n * _LN2_LO
    # Taylor series of exp(f), Horner from the 1/13! term
    p = 1.0 / 6227020800.0
    p = p * f + 1.0 / 479001600.0
    p = p * f + 1.0 / 39916800.0
    p = p * f + 1.0 / 3628800.0
    p = p * f + 1.0 / 362880.0
    p = p * f + 1.0 / 40320.0
    p = p * f + 1.0 / 5040.0
    p = p * f + 1.0 / 720.0
    p = p * f + 1.0 / 120.0
    p = p * f + 1.0 / 24.0
    p = p * f + 1.0 / 6.0
    p = p * f + 0.5
    p = p * f + 1.0
    p = p * f + 1.0
    scale = bits_float((float_bits(shifted) - _ROUND_BITS + _BIAS) << 52)
    return p * scale * _TWO_M64


@jit
def log_positive(y: float) -> float:
    """log y for a normal positive finite y (not subnormal, 0, inf or nan)."""
    bits = float_bits(y)
    e = (bits >> 52) - 1023
    m = bits_float((bits & _MANTISSA) | _ONE_BITS)  # y = 2^e · m, m ∈ [1, 2)
    big = m > _SQRT2
    m = m * 0.5 if big else m
    n = float(e + 1 if big else e)
    # log m = 2·atanh(s) = f − s·(f − R), f = m − 1 (exact), s = f / (2 + f), as fdlibm's log:
    # the rounding of s only touches the small correction s·(f − R)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    # R = Σ_{k≥1} 2 z^k / (2k + 1), Horner from the z^10 term
    r = 2.0 / 21.0
    r = r * z + 2.0 / 19.0
    r = r * z + 2.0 / 17.0
    r = r * z + 2.0 / 15.0
    r = r * z + 2.0 / 13.0
    r = r * z + 2.0 / 11.0
    r = r * z + 2.0 / 9.0
    r = r * z + 2.0 / 7.0
    r = r * z + 2.0 / 5.0
    r = r * z + 2.0 / 3.0
    r = r * z
    return n * _LN2_HI + ((f - s * (f - r)) + n * _LN2_LO)
