"""The split-count augmentation of a Poisson whose rate is a sum (``cemodel.augment``).

    y ~ Poisson(Σ_k r_k)   ⇔   c_k ~ Poisson(r_k) independently, y = Σ_k c_k

Given y, the split counts c = (c_1 … c_K) are Multinomial(y, ·); their variational factor
is q(c) = Multinomial(y, φ), with E[c_k] = y φ_k. The joint density of y and c is
Π_k Poisson(c_k; r_k), whose base measure −Σ_k ln c_k! cancels against that of q(c), so the
ELBO needs only (Hoffman et al. 2010, GaP-NMF; SSVI paper §4.3):

    E[ln p(y, c | r)] − E[ln q(c)] = Σ_k E[c_k] (E[ln r_k] − ln φ_k) − Σ_k E[r_k] − ln y!

Neither family can be written in a model file: the compiler introduces them.
"""

from .base import CHILD, FamilySpec, Param, t, v

x = CHILD

# The introduced latent: the split counts of one observed count over the K terms of its rate.
# Its prior is the rest of the augmented Poisson (no terms of its own); statistic: c (K,).
SPLIT = FamilySpec(
    name="SplitCounts",
    params=(),
    support="count",
    event_rank=1,
    variational="split",
    stats=(("value", 1),),
    log_density=(),
    doc="the split counts of a Poisson count over the terms of its rate (introduced)",
)

# The observed count with its split: log p = Σ_k c_k ln r_k − Σ_k r_k − ln Γ(y + 1).
# A view of the sum with a letter (``log rate_k``) is the k-th term's; without, the whole sum.
POISSON_SPLIT = FamilySpec(
    name="Poisson·split",
    params=(Param("split", 1, "count"), Param("rate", 0, "positive")),
    support="count",
    event_rank=0,
    variational=None,
    stats=(),
    log_density=(
        t(1.0, v("value", "split", "k"), v("log", "rate", "k")),
        t(-1.0, v("value", "rate")),
        t(-1.0, v("lgamma1p", x)),
    ),
    doc="a Poisson count whose rate is a sum, with its split counts (introduced)",
)
