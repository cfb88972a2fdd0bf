"""Geometric(p): the number of trials up to and including the first success (1, 2, ...), as
in numpy, scipy.stats.geom and PyMC. Observed only; a Beta p is conjugate."""

from .base import CHILD, FamilySpec, Param, t, v

x = CHILD
SPEC = FamilySpec(
    name="Geometric",
    params=(Param("p", 0, "unit"),),
    support="trials",
    event_rank=0,
    variational=None,
    stats=(),
    # log p = log p + (x − 1) log(1 − p)
    log_density=(
        t(1.0, v("log", "p")),
        t(1.0, v("value", x), v("log1m", "p")),
        t(-1.0, v("log1m", "p")),
    ),
)
