"""NegativeBinomial(r, p): the number of failures before the r-th success, each trial a
success with probability p (numpy's negative_binomial(n, p), PyMC's NegativeBinomial(n, p)).
Observed only, r known (a constant or data); a Beta p is conjugate."""

from .base import CHILD, FamilySpec, Param, View, t, v

x = CHILD
SPEC = FamilySpec(
    name="NegativeBinomial",
    params=(Param("r", 0, "positive"), Param("p", 0, "unit")),
    support="count",
    event_rank=0,
    variational=None,
    stats=(),
    # log p = r log p + x log(1 − p) + log Γ(x + r) − log Γ(r) − log x!
    log_density=(
        t(1.0, v("value", "r"), v("log", "p")),
        t(1.0, v("value", x), v("log1m", "p")),
        t(1.0, View("log_negbin", ("r", x))),
    ),
)
