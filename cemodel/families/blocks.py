"""Joint blocks: a mean and the precision its prior is scaled by, as one factor.

``mu ~ Normal(m0, kappa * tau)`` with ``tau ~ Gamma(a, b)`` (or ``MultivariateNormal`` with a
``Wishart`` precision) is the Normal-Gamma (Normal-Wishart) prior. When every child reads mu
through a Normal whose precision is tau itself, the complete conditional of the pair is again
Normal-Gamma (Normal-Wishart), so q(mu, tau) need not factorise (Bishop 2006, §10.2.1;
Hensman et al. 2012, Table 1's mixture). ``cemodel.blocks`` forms the block; these are its
families. The statistics of the pair are those its terms are linear in:

    Normal-Gamma:    log τ, τ, τμ, τμ²          Normal-Wishart:  Λ, log|Λ|, Λμ, μᵀΛμ

Their names hold a hyphen, so a model file cannot use them: the compiler introduces them.
"""

import math

from .base import CHILD, FamilySpec, Param, View, t, v

x = CHILD

# log p(μ, τ) = ½ log κ + ½ log τ − (κ/2) τμ² + κ m τμ − (κ/2) m² τ − ½ log 2π
#               + a log b − lnΓ(a) + (a − 1) log τ − b τ
NORMAL_GAMMA = FamilySpec(
    name="Normal-Gamma",
    params=(Param("mean", 0, "real"), Param("prec_scale", 0, "positive"),
            Param("shape", 0, "positive"), Param("rate", 0, "positive")),
    support="real",
    event_rank=0,
    variational="normal_gamma",
    stats=(("log", 0), ("value", 0), ("prec_mean", 0), ("quad", 0)),
    log_density=(
        t(0.5, v("log", "prec_scale")),
        t(-0.5, v("log", x)),
        t(-0.5, v("value", "prec_scale"), v("quad", x)),
        t(1.0, v("value", "prec_scale"), v("value", "mean"), v("prec_mean", x)),
        t(-0.5, v("value", "prec_scale"), v("square", "mean"), v("value", x)),
        t(-0.5 * math.log(2 * math.pi)),
        t(1.0, v("value", "shape"), v("log", "rate")),
        t(-1.0, v("lgamma", "shape")),
        t(1.0, v("value", "shape"), v("log", x)),
        t(-1.0, v("value", "rate"), v("value", x)),
    ),
    doc="the joint q(mean, precision) of a Normal mean whose prior precision is κ·τ",
)

# log p(μ, Λ) = (D/2) log κ + ½ log|Λ| − (κ/2) μᵀΛμ + κ mᵀΛμ − (κ/2) tr(Λ m mᵀ) − (D/2) log 2π
#               + ((ν − D − 1)/2) log|Λ| − ½ tr(W⁻¹Λ) − ln Z_W(ν, W)
NORMAL_WISHART = FamilySpec(
    name="Normal-Wishart",
    params=(Param("mean", 1, "real"), Param("prec_scale", 0, "positive"),
            Param("dof", 0, "positive"), Param("scale", 2, "spd")),
    support="spd",
    event_rank=2,
    variational="normal_wishart",
    stats=(("value", 2), ("logdet", 0), ("prec_mean", 1), ("quad", 0)),
    shape_from="scale",
    log_density=(
        t(0.5, v("dim", x), v("log", "prec_scale")),
        t(0.5, v("value", "dof"), v("logdet", x)),
        t(-0.5, v("dim", x), v("logdet", x)),
        t(-0.5, v("value", "prec_scale"), v("quad", x)),
        t(1.0, v("value", "prec_scale"), v("value", "mean", "i"), v("prec_mean", x, "i")),
        t(-0.5, v("value", "prec_scale"), v("value", x, "i", "j"), v("outer", "mean", "i", "j")),
        t(-0.5 * math.log(2 * math.pi), v("dim", x)),
        t(-0.5, v("inv", "scale", "i", "j"), v("value", x, "i", "j")),
        t(-1.0, View("wishart_lognorm", ("dof", "scale"))),
    ),
    doc="the joint q(mean, precision) of an MVN mean whose prior precision is κ·Λ",
)

# (mean family, precision family) -> the block's family
BLOCKS = {
    ("Normal", "Gamma"): NORMAL_GAMMA,
    ("MultivariateNormal", "Wishart"): NORMAL_WISHART,
}

# How the statistics of a block's members, met in one term, become the block's:
# (precision statistic, mean statistic) -> block statistic; a precision statistic alone keeps
# its name. The mean's letters are summed against the precision's (Λ_ij μ_j = (Λμ)_i).
FUSED = {
    ("value", "value"): "prec_mean",
    ("value", "square"): "quad",
    ("value", "outer"): "quad",
}
