"""Dirichlet(alpha) on the K-simplex. Statistic: log x (K,)."""

from .base import CHILD, SHAPE_SMALLEST, FamilySpec, Param, t, v

x = CHILD
SPEC = FamilySpec(
    name="Dirichlet",
    params=(Param("alpha", 1, "positive", SHAPE_SMALLEST),),
    support="simplex",
    event_rank=1,
    variational="dirichlet",
    stats=(("log", 1),),
    shape_from="alpha",
    # log p = Σ_k (α_k − 1) log x_k + lnΓ(Σα) − Σ_k lnΓ(α_k)
    log_density=(
        t(1.0, v("value", "alpha", "k"), v("log", x, "k")),
        t(-1.0, v("log", x, "k")),
        t(1.0, v("lgamma_sum", "alpha")),
        t(-1.0, v("lgamma", "alpha", "k")),
    ),
    doc="Dirichlet(alpha) with alpha a vector, or Dirichlet(a, K): a repeated K times",
)
