"""cemodel: a compiler for conjugate-exponential Bayesian models.

Write a model in the .cem language, and cemodel derives every complete
conditional and emits a Python module of numba kernels that fits it by
variational inference.
"""

__version__ = "0.1.0"
