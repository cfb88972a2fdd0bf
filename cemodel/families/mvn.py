"""MultivariateNormal(mean, precision matrix). Statistics: x (D,), x xᵀ (D, D)."""

import math

from .base import CHILD, FamilySpec, Param, t, v

x = CHILD
SPEC = FamilySpec(
    name="MultivariateNormal",
    params=(Param("mean", 1, "real"), Param("precision", 2, "spd")),
    support="vector",
    event_rank=1,
    variational="mvn",
    stats=(("value", 1), ("outer", 2)),
    shape_from="mean",
    # log p = ½ log|P| − ½ tr(P x xᵀ) + xᵀ P m − ½ tr(P m mᵀ) − (D/2) log 2π
    log_density=(
        t(0.5, v("logdet", "precision")),
        t(-0.5, v("value", "precision", "i", "j"), v("outer", x, "i", "j")),
        t(1.0, v("value", x, "i"), v("value", "precision", "i", "j"), v("value", "mean", "j")),
        t(-0.5, v("value", "precision", "i", "j"), v("outer", "mean", "i", "j")),
        t(-0.5 * math.log(2 * math.pi), v("dim", x)),
    ),
    aliases=("MVN",),
    doc="MultivariateNormal(mean, precision), alias MVN; the second argument is a precision matrix",
)
