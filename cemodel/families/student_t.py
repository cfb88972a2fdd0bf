"""StudentT(nu, mean, precision): Student's t with ν degrees of freedom, location μ and
precision τ (scale 1/√τ), as in BUGS's dt(μ, τ, ν) with ν first. Observed only, ν known.

It is not an exponential family; the compiler never fits it as written. ``cemodel.augment_t``
rewrites every observed StudentT through its Gamma scale mixture,

    StudentT(y; ν, μ, τ) = ∫ Normal(y; μ, λτ) Gamma(λ; ν/2, ν/2) dλ,

so this spec holds only what the model builder checks (parameters, domains, support).
"""

from .base import SHAPE_SMALLEST, FamilySpec, Param

SPEC = FamilySpec(
    name="StudentT",
    # ν/2 becomes the shape of a Gamma (Param.smallest)
    params=(Param("nu", 0, "positive", 2.0 * SHAPE_SMALLEST), Param("mean", 0, "real"),
            Param("precision", 0, "positive")),
    support="real",
    event_rank=0,
    variational=None,
    stats=(),
    log_density=(),
    latent_hint="; a latent t can be written as its scale mixture, which cemodel fits (in "
                "mean field): a latent lam ~ Gamma(nu / 2, nu / 2) and Normal(mean, lam * "
                "precision) in place of StudentT(nu, mean, precision)",
    doc="StudentT(nu, mean, precision): Student's t, observed only, rewritten as a Normal "
        "whose precision is scaled by a Gamma(ν/2, ν/2) latent (cemodel.augment_t)",
)
