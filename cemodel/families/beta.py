"""Beta(a, b) on (0, 1). Statistics: log x, log(1 − x)."""

from .base import CHILD, SHAPE_SMALLEST, FamilySpec, Param, View, t, v

x = CHILD
SPEC = FamilySpec(
    name="Beta",
    params=(Param("a", 0, "positive", SHAPE_SMALLEST),
            Param("b", 0, "positive", SHAPE_SMALLEST)),
    support="unit",
    event_rank=0,
    variational="beta",
    stats=(("log", 0), ("log1m", 0)),
    # log p = (a − 1) log x + (b − 1) log(1 − x) − ln B(a, b)
    log_density=(
        t(1.0, v("value", "a"), v("log", x)),
        t(-1.0, v("log", x)),
        t(1.0, v("value", "b"), v("log1m", x)),
        t(-1.0, v("log1m", x)),
        t(-1.0, View("lbeta", ("a", "b"))),
    ),
)
