"""The Pólya-Gamma augmentation of a logistic link (``cemodel.augment_logistic``).

For a count y with a logistic link, σ(η)^a (1 − σ(η))^(b − a) = e^{aη} / (1 + e^η)^b, and
(Polson, Scott & Windle 2013, JASA, Theorem 1)

    e^{aη} / (1 + e^η)^b = 2^{−b} e^{κη} ∫ e^{−ωη²/2} PG(ω | b, 0) dω,   κ = a − b/2.

With ω a latent variable, ω ~ PG(b, 0), the joint density of y and ω is

    log p(y, ω | η) = κ η − ω η²/2 − b log 2 + log C + log PG(ω | b, 0),

Gaussian in η (so conjugate for every Normal/MVN variable η is linear in) and an
exponential tilt of PG(b, 0) in ω: the complete conditional of ω is PG(b, c) with
c² = E[η²], whose base measure PG(ω | b, 0) cancels against the prior's in the ELBO.

    Bernoulli(σ(η)):           a = y,  b = 1,      κ = y − 1/2
    Binomial(n, σ(η)):         a = y,  b = n,      κ = y − n/2,     C = (n choose y)
    NegativeBinomial(r, σ(η)): a = r,  b = y + r,  κ = (r − y)/2,   C = Γ(y + r)/(Γ(r) y!)

(NegativeBinomial(r, p) counts the failures before the r-th success, p^r (1 − p)^y, as in
``cemodel.families.negative_binomial``.) None of these families can be written in a model
file: the compiler introduces them.
"""

import math

from .base import CHILD, FamilySpec, Param, View, t, v

x = CHILD
LOG2 = math.log(2.0)

# The introduced latent ω ~ PG(b, 0): its prior is the base measure of q(ω) = PG(b, c), so
# it has no terms of its own; statistic: ω.
POLYA_GAMMA = FamilySpec(
    name="PolyaGamma",
    params=(),
    support="positive",
    event_rank=0,
    variational="polyagamma",
    stats=(("value", 0),),
    log_density=(),
    doc="the Pólya-Gamma variable of a logistic link (introduced)",
)

_OMEGA = Param("omega", 0, "positive")
_ETA = Param("eta", 0, "real")
_QUADRATIC = t(-0.5, v("value", "omega"), v("square", "eta"))  # − ω η²/2


def _augmented(family: str, params: tuple[Param, ...], terms: tuple) -> FamilySpec:
    """``family`` with a logistic link as the joint density of y and ω: observed only."""
    return FamilySpec(
        name=f"{family}·PG", params=(*params, _OMEGA, _ETA),
        support="binary" if family == "Bernoulli" else "count", event_rank=0,
        variational=None, stats=(), log_density=(*terms, _QUADRATIC),
        doc=f"a {family} with a logistic link, with its Pólya-Gamma variable (introduced)",
    )


# log p = (y − 1/2) η − ω η²/2 − log 2
BERNOULLI_PG = _augmented("Bernoulli", (), (
    t(1.0, v("value", x), v("value", "eta")),
    t(-0.5, v("value", "eta")),
    t(-LOG2),
))
# log p = (y − n/2) η − ω η²/2 − n log 2 + log C(n, y)
BINOMIAL_PG = _augmented("Binomial", (Param("n", 0, "count"),), (
    t(1.0, v("value", x), v("value", "eta")),
    t(-0.5, v("value", "n"), v("value", "eta")),
    t(-LOG2, v("value", "n")),
    t(1.0, View("log_binom", ("n", x))),
))
# log p = (r − y)/2 η − ω η²/2 − (y + r) log 2 + log Γ(y + r) − log Γ(r) − log y!
NEGATIVE_BINOMIAL_PG = _augmented("NegativeBinomial", (Param("r", 0, "positive"),), (
    t(0.5, v("value", "r"), v("value", "eta")),
    t(-0.5, v("value", x), v("value", "eta")),
    t(-LOG2, v("value", "r")),
    t(-LOG2, v("value", x)),
    t(1.0, View("log_negbin", ("r", x))),
))

# the family each observed family becomes under a logistic link, and its parameter p
AUGMENTED = {
    "Bernoulli": BERNOULLI_PG,
    "Binomial": BINOMIAL_PG,
    "NegativeBinomial": NEGATIVE_BINOMIAL_PG,
}
