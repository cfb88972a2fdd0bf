"""Numbers the compiler and the runtime share (dependency-free, so that neither imports the
other for them)."""

# the smallest shape a Dirichlet, Beta or Gamma parameter may have: held as α − 1 in the
# natural parameters, α < 2^-53 (ε/2) would be 0 there, so such a parameter must be at least ε
SHAPE_SMALLEST = float(2.0**-52)
