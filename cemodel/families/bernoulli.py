"""Bernoulli(p) on {0, 1}. Statistic: x."""

from .base import CHILD, FamilySpec, Param, t, v

x = CHILD
SPEC = FamilySpec(
    name="Bernoulli",
    params=(Param("p", 0, "unit"),),
    support="binary",
    event_rank=0,
    variational="bernoulli",
    stats=(("value", 0),),
    # log p = x log p + (1 − x) log(1 − p)
    log_density=(
        t(1.0, v("value", x), v("log", "p")),
        t(1.0, v("log1m", "p")),
        t(-1.0, v("value", x), v("log1m", "p")),
    ),
)
