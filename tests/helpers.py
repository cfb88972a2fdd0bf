"""Assertions shared by the test modules."""

import numpy as np


def never_decreases(elbo, rtol: float = 1e-9) -> bool:
    """Whether an ELBO trace never drops by more than rtol of its size (round-off): the
    property every mean-field coordinate step must keep."""
    elbo = np.asarray(elbo, dtype=float)
    return bool(np.all(np.diff(elbo) >= -rtol * np.abs(elbo[:-1])))


def call_kernel(kernel, state, fixed):
    """Run a generated kernel (tests only) with each argument from ``fixed`` or else the fit
    state's attribute of the parameter's name."""
    import inspect

    names = inspect.signature(getattr(kernel, "py_func", kernel)).parameters
    return kernel(*[fixed[n] if n in fixed else getattr(state, n) for n in names])


def run_example(script: str, *args: str):
    """Run ``examples/<script>`` as a user would (a subprocess, 300 s at most), with one numba
    thread: the test workers already keep both cores busy, and two threads per process on
    them would only wait for each other (issue 22: 5-10x slower per iteration)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, str(repo / "examples" / script), *args], cwd=repo,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NUMBA_NUM_THREADS": "1"})
