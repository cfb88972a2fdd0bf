"""Poisson(rate) on counts. Observed only."""

from .base import CHILD, FamilySpec, Param, t, v

x = CHILD
SPEC = FamilySpec(
    name="Poisson",
    params=(Param("rate", 0, "positive"),),
    support="count",
    event_rank=0,
    variational=None,
    stats=(),
    # log p = x log r − r − lnΓ(x + 1)
    log_density=(
        t(1.0, v("value", x), v("log", "rate")),
        t(-1.0, v("value", "rate")),
        t(-1.0, v("lgamma1p", x)),
    ),
)
