"""Gamma(shape a, rate b) on (0, ∞). Statistics: log x, x."""

from .base import CHILD, SHAPE_SMALLEST, FamilySpec, Param, t, v

x = CHILD
SPEC = FamilySpec(
    name="Gamma",
    params=(Param("shape", 0, "positive", SHAPE_SMALLEST), Param("rate", 0, "positive")),
    support="positive",
    event_rank=0,
    variational="gamma",
    stats=(("log", 0), ("value", 0)),
    # log p = a log b − lnΓ(a) + (a − 1) log x − b x
    log_density=(
        t(1.0, v("value", "shape"), v("log", "rate")),
        t(-1.0, v("lgamma", "shape")),
        t(1.0, v("value", "shape"), v("log", x)),
        t(-1.0, v("log", x)),
        t(-1.0, v("value", "rate"), v("value", x)),
    ),
)
