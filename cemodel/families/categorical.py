"""Categorical(p) over K categories. Statistic: onehot(x) (K,)."""

from .base import CHILD, FamilySpec, Param, t, v

x = CHILD
SPEC = FamilySpec(
    name="Categorical",
    params=(Param("p", 1, "simplex"),),
    support="category",
    event_rank=0,
    variational="categorical",
    stats=(("onehot", 1),),
    shape_from="p",
    # log p = Σ_k [x = k] log p_k
    log_density=(t(1.0, v("onehot", x, "k"), v("log", "p", "k")),),
    doc="Categorical(p) with p a probability vector (e.g. a Dirichlet variable)",
)
