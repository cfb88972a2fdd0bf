"""Normal(mean, precision) on the real line. Statistics: x, x²."""

import math

from .base import CHILD, FamilySpec, Param, t, v

x = CHILD
SPEC = FamilySpec(
    name="Normal",
    params=(Param("mean", 0, "real"), Param("precision", 0, "positive")),
    support="real",
    event_rank=0,
    variational="normal",
    stats=(("value", 0), ("square", 0)),
    # log p = ½ log τ − ½ τ x² + τ x m − ½ τ m² − ½ log 2π
    log_density=(
        t(0.5, v("log", "precision")),
        t(-0.5, v("value", "precision"), v("square", x)),
        t(1.0, v("value", "precision"), v("value", x), v("value", "mean")),
        t(-0.5, v("value", "precision"), v("square", "mean")),
        t(-0.5 * math.log(2 * math.pi)),
    ),
    doc="Normal(mean, precision): the second argument is a precision (1/variance), as in BUGS",
)
