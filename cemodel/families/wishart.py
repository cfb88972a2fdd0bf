"""Wishart(dof nu, scale W) on D×D precision matrices. Statistics: Λ, log|Λ|."""

from .base import CHILD, FamilySpec, Param, View, t, v

x = CHILD
SPEC = FamilySpec(
    name="Wishart",
    params=(Param("dof", 0, "positive"), Param("scale", 2, "spd")),
    support="spd",
    event_rank=2,
    variational="wishart",
    stats=(("value", 2), ("logdet", 0)),
    shape_from="scale",
    # log p = ((ν − D − 1)/2) log|Λ| − ½ tr(W⁻¹ Λ) − (νD/2) log 2 − (ν/2) log|W| − ln Γ_D(ν/2)
    log_density=(
        t(0.5, v("value", "dof"), v("logdet", x)),
        t(-0.5, v("dim", x), v("logdet", x)),
        t(-0.5, v("logdet", x)),
        t(-0.5, v("inv", "scale", "i", "j"), v("value", x, "i", "j")),
        t(-1.0, View("wishart_lognorm", ("dof", "scale"))),
    ),
)
