"""Binomial(n, p): successes in n trials. Observed only (no latent Binomial)."""

from .base import CHILD, FamilySpec, Param, View, t, v

x = CHILD
SPEC = FamilySpec(
    name="Binomial",
    params=(Param("n", 0, "count"), Param("p", 0, "unit")),
    support="count",
    event_rank=0,
    variational=None,
    stats=(),
    # log p = x log p + (n − x) log(1 − p) + log C(n, x)
    log_density=(
        t(1.0, v("value", x), v("log", "p")),
        t(1.0, v("value", "n"), v("log1m", "p")),
        t(-1.0, v("value", x), v("log1m", "p")),
        t(1.0, View("log_binom", ("n", x))),
    ),
)
