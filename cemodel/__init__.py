"""cemodel: a compiler for conjugate-exponential Bayesian models.

Write a model in the .cem language, and cemodel derives every complete
conditional and emits a Python module of numba kernels that fits it by
variational inference.
"""

from .version import __version__ as __version__

__all__ = ["CemEstimator", "Fit", "Model", "load_result"]  # and cemodel.compile(path, **settings)


def __getattr__(name: str):  # the Python API, imported on first use: `import cemodel` stays light
    if name == "compile":
        from .compiler import compile

        return compile
    if name in ("CemEstimator", "Fit", "Inference", "Model", "load_result"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'cemodel' has no attribute {name!r}")
