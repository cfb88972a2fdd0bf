"""BigARTM (bigartm 0.9.2, C++) as a peer of ``lda_mf.py``, driven through a subprocess.

bigartm pins ``protobuf==3.20.3``, so it usually lives in its own virtual environment:

    python -m venv /work/venvs/bigartm
    /work/venvs/bigartm/bin/pip install bigartm==0.9.2 protobuf==3.20.3 six

The python that runs ``bigartm_driver.py`` is, in order: ``--bigartm-python`` (or the
``CEMODEL_BIGARTM_PYTHON`` environment variable), this python if it imports ``artm``, then each
of ``DEFAULT_PYTHONS``. When none imports ``artm`` the row says ``skipped: <reason>``.

Settings: PLSA + SmoothSparsePhi (tau_phi) + SmoothSparseTheta (tau_theta) regularisers. The
regularised EM of ARTM maximises log p(X | Phi, Theta) + sum tau_phi log phi_wt + sum tau_theta
log theta_td; with tau = prior - 1 that is the log posterior of LDA with Dirichlet(eta) topics
and Dirichlet(alpha) proportions, so the default tau_phi = eta - 1, tau_theta = alpha - 1 makes
the fit the MAP (EM) estimate of the same model the other rows fit by variational Bayes.
``fit_offline``, ``num_processors=1``, ``num_document_passes`` inner passes per document (its
default 10, a fixed count: ARTM has no per-document tolerance), Theta not reused between passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "bigartm_driver.py"
ENV_VARIABLE = "CEMODEL_BIGARTM_PYTHON"
DEFAULT_PYTHONS = (Path.home() / "venvs" / "bigartm" / "bin" / "python",
                   Path("/work/venvs/bigartm/bin/python"))


@dataclass(frozen=True)
class Settings:
    python: str | None = None  # --bigartm-python
    doc_passes: int = 10
    tau_phi: float | None = None  # None: eta - 1
    tau_theta: float | None = None  # None: alpha - 1


@dataclass(frozen=True)
class Fit:
    phi: np.ndarray  # snapshots x K x V, the matrix's column order
    passes: np.ndarray
    seconds: np.ndarray  # the fit_offline calls' seconds up to each snapshot
    nwt: np.ndarray  # K x V expected counts of the last pass
    version: str
    peak_mb: float
    fit_mb: float


def find_python(requested: str | None) -> tuple[str | None, str]:
    """(a python that imports ``artm``, its version), or (None, why not)."""
    explicit = requested or os.environ.get(ENV_VARIABLE)
    candidates = [explicit] if explicit else [sys.executable, *map(str, DEFAULT_PYTHONS)]
    tried = []
    for python in candidates:
        try:
            # cwd: ARTM's glog writes bigartm.* log files into the working directory
            done = subprocess.run([python, "-c", "import artm; print(artm.version())"],
                                  capture_output=True, text=True, timeout=120,
                                  cwd=tempfile.gettempdir())
        except (OSError, subprocess.TimeoutExpired) as exc:
            tried.append(f"{python}: {type(exc).__name__}")
            continue
        if done.returncode == 0:
            return python, done.stdout.strip()
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        tried.append(f"{python}: {last}")
    return None, "bigartm not importable (" + "; ".join(tried) + ")"


def write_uci(X_train, folder: Path) -> None:
    """``docword.train.txt`` (D, W, NNZ, then 1-based ``doc word count`` lines) and
    ``vocab.train.txt`` (token of column j = ``str(j)``)."""
    X = X_train.tocoo()
    with open(folder / "docword.train.txt", "w", encoding="ascii") as handle:
        handle.write(f"{X.shape[0]}\n{X.shape[1]}\n{X.nnz}\n")
        np.savetxt(handle, np.column_stack([X.row + 1, X.col + 1, X.data]).astype(np.int64),
                   fmt="%d")
    with open(folder / "vocab.train.txt", "w", encoding="ascii") as handle:
        handle.write("\n".join(str(j) for j in range(X.shape[1])) + "\n")


def fit(python: str, X_train, k: int, passes: int, alpha: float, eta: float, seed: int,
        every: int, opts: Settings, log) -> Fit:
    """Run ``bigartm_driver.py`` on ``X_train`` in a temporary directory; its result."""
    tau_phi = eta - 1.0 if opts.tau_phi is None else opts.tau_phi
    tau_theta = alpha - 1.0 if opts.tau_theta is None else opts.tau_theta
    with tempfile.TemporaryDirectory(prefix="cemodel-bigartm-") as tmp:
        folder = Path(tmp)
        write_uci(X_train, folder)
        command = [python, str(DRIVER), str(folder), "--k", str(k), "--passes", str(passes),
                   "--doc-passes", str(opts.doc_passes), "--tau-phi", repr(tau_phi),
                   "--tau-theta", repr(tau_theta), "--seed", str(seed),
                   "--eval-every", str(every)]
        start = time.perf_counter()
        # cwd: ARTM's glog writes bigartm.* log files into the working directory
        done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
        if done.stderr.strip():
            log("\n".join("    " + line for line in done.stderr.strip().splitlines()[-5:]))
        if done.returncode != 0:
            raise RuntimeError(f"bigartm driver exited with {done.returncode}: "
                               + (done.stderr.strip().splitlines() or [""])[-1])
        log(f"    bigartm: driver process {time.perf_counter() - start:.1f} s in all")
        with np.load(folder / "result.npz") as saved:
            return Fit(saved["phi"], saved["passes"], saved["seconds"], saved["nwt"],
                       str(saved["version"]), float(saved["peak_mb"]), float(saved["fit_mb"]))


def topics(phi: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """ARTM's Phi as the benchmark's topics: K x V rows normalised (they are, up to float32
    round-off). A word no topic gives mass keeps probability 0 and the completion perplexity
    of a held-out document scoring it is infinite: reported, not patched."""
    phi = np.maximum(np.asarray(phi, dtype=np.float64), floor)
    return phi / phi.sum(axis=1, keepdims=True)
