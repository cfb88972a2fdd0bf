"""Exponential(rate) on (0, ∞); as a prior its posterior family is Gamma."""

from .base import CHILD, FamilySpec, Param, t, v

x = CHILD
SPEC = FamilySpec(
    name="Exponential",
    params=(Param("rate", 0, "positive"),),
    support="positive",
    event_rank=0,
    variational="gamma",
    posterior="Gamma",
    stats=(("log", 0), ("value", 0)),
    # log p = log r − r x
    log_density=(
        t(1.0, v("log", "rate")),
        t(-1.0, v("value", "rate"), v("value", x)),
    ),
)
