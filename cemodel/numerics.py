"""Numbers the compiler and the runtime share (dependency-free, so that neither imports the
other for them)."""

# the smallest shape a Dirichlet, Beta or Gamma parameter may have: held as α − 1 in the
# natural parameters, α < 2^-53 (ε/2) would be 0 there, so such a parameter must be at least ε
SHAPE_SMALLEST = float(2.0**-52)

# The natural parameters' domain of each variational family whose domain is a box, per
# statistic in the family's order (coefficient form: q(x) ∝ exp(Σ_s λ_s·t_s(x))): the open
# (low, high) bounds, None for no bound. A Dirichlet or Beta holds α − 1 (> −1), a Gamma
# (α − 1, −β), a Normal (τμ, −τ/2); a categorical's or Bernoulli's logits are unbounded. The
# matrix families and the Normal-Gamma are not boxes.
NATURAL_BOX: dict[str, tuple[tuple[float | None, float | None], ...]] = {
    "dirichlet": ((-1.0, None),),
    "beta": ((-1.0, None), (-1.0, None)),
    "gamma": ((-1.0, None), (None, 0.0)),
    "normal": ((None, None), (None, 0.0)),
    "categorical": ((None, None),),
    "bernoulli": ((None, None),),
}
