"""Multinomial(n, p): a vector of counts over K categories summing to n (a bag of words, a
histogram). Observed only; a Dirichlet p is conjugate, and p may be selected by a categorical
(a mixture of multinomials)."""

from .base import CHILD, FamilySpec, Param, View, t, v

x = CHILD
SPEC = FamilySpec(
    name="Multinomial",
    params=(Param("n", 0, "count"), Param("p", 1, "simplex")),
    support="count",
    event_rank=1,
    variational=None,
    stats=(),
    shape_from="p",
    # log p = Σ_k x_k log p_k + log n! − Σ_k log x_k!   (n = Σ_k x_k is checked)
    log_density=(
        t(1.0, v("value", x, "k"), v("log", "p", "k")),
        t(1.0, View("log_multinomial", ("n", x))),
    ),
    doc="Multinomial(n, p) with n the total of the counts and p a probability vector",
)
