"""NumPy-level special functions for the ``prepare`` code of generated modules.

Everything here is vectorised over leading batch axes and runs once per fit (constants of the
ELBO, inverses of hyperparameter matrices), so it is plain NumPy/SciPy, not numba. A matrix
that should be positive-definite and is not raises :class:`~cemodel.errors.CemDataError`: it
comes from the user's hyperparameters or data.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special as _sps

from ..errors import CemDataError
from .data_values import first_index, where_text

__all__ = ["LOG_ZERO", "gammaln", "inv", "lbeta", "lgamma_sum", "log_binom", "log_data",
           "log_multinomial", "log_negbin", "logdet", "wishart_lognorm"]

# log 0 as a finite number: exp(LOG_ZERO) is 0, and 0 · LOG_ZERO is 0 where 0 · (−inf) would be
# NaN (an exposure e = 0 with its count y = 0 adds y·log e = 0 to the ELBO). Small enough that
# a sum of a few hundred of them stays finite.
LOG_ZERO = -1e250

_LOG_2 = math.log(2.0)
_LOG_PI = math.log(math.pi)


def gammaln(x):
    """log |Γ(x)|, elementwise."""
    return _sps.gammaln(x)


def _given(bad: np.ndarray, given) -> np.ndarray:
    """``bad`` where the data are given (``given`` None: everywhere)."""
    if given is None:
        return bad
    return bad & np.broadcast_to(np.asarray(given, dtype=bool), bad.shape)


def _first(bad: np.ndarray, plates: tuple[str, ...] = ()) -> tuple[tuple[int, ...], str]:
    """The index of the first True in ``bad``, and its text for a message: " at items[3]"
    where the leading axes' plates are known, else " at [i, j]"."""
    at = first_index(bad)
    if plates and len(at) >= len(plates):
        return at, where_text([f"{p}[{i}]" for p, i in zip(plates, at, strict=False)],
                              at[len(plates):])
    return at, (f" at [{', '.join(map(str, at))}]" if at else "")


def log_data(values, what: str):
    """log of a known quantity read from the data (``log(e[n])`` of an exposure, a data
    factor of a split Poisson term), elementwise: 0 gives LOG_ZERO; a negative value, whose
    log does not exist, is refused with ``CemDataError`` naming ``what``."""
    values = np.asarray(values, dtype=np.float64)
    bad = ~(values >= 0.0)  # also catches NaN
    if np.any(bad):
        at, where = _first(bad)
        raise CemDataError(f"{what}: expected values ≥ 0 (the model takes their log), found "
                           f"{values[at]:g}{where}")
    with np.errstate(divide="ignore"):
        out = np.where(values > 0.0, np.log(np.where(values > 0.0, values, 1.0)), LOG_ZERO)
    return out[()] if out.ndim == 0 else out


def log_negbin(r, x):
    """log C(x + r − 1, x) = log Γ(x + r) − log Γ(r) − log x!, elementwise: the base measure
    of NegativeBinomial(r, p) (x failures before the r-th success)."""
    r = np.asarray(r, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    out = _sps.gammaln(x + r) - _sps.gammaln(r) - _sps.gammaln(x + 1.0)
    return out[()] if np.ndim(out) == 0 else out


def log_multinomial(n, x, what: str = "Multinomial data", plates: tuple[str, ...] = (),
                    given=None):
    """log n! − Σ_k log x_k! over the last axis of the counts x: the base measure of
    Multinomial(n, p). The counts must add up to n: anything else has probability 0, and is
    refused with ``CemDataError`` naming ``what`` (the data) and the place (``plates``:
    the names of the counts' leading axes, where known); ``given``: where the counts are
    given, None for everywhere (a missing row is not checked: its factor drops out)."""
    n = np.asarray(n, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    total = x.sum(axis=-1)
    n_b, total_b = np.broadcast_arrays(n, total)
    bad = _given(n_b != total_b, given)
    if np.any(bad):
        at, where = _first(bad, plates)
        raise CemDataError(
            f"{what}: expected counts adding up to the number of trials, found counts adding "
            f"up to {total_b[at]:g} with {n_b[at]:g} trials{where}")
    out = _sps.gammaln(n + 1.0) - _sps.gammaln(x + 1.0).sum(axis=-1)
    return out[()] if np.ndim(out) == 0 else out


def lgamma_sum(alpha):
    """log Γ(Σ_k α_k), summing over the last axis."""
    return _sps.gammaln(np.sum(alpha, axis=-1))


def lbeta(a, b):
    """log B(a, b) = log Γ(a) + log Γ(b) - log Γ(a + b), elementwise."""
    return _sps.betaln(a, b)


def log_binom(n, k, what: str = "Binomial data", plates: tuple[str, ...] = (), given=None):
    """log C(n, k) = log n! - log k! - log (n-k)!, elementwise (n, k may be real).

    The trials n must be ≥ 0 and the successes k lie in [0, n]: anything else has
    probability 0, and is refused with ``CemDataError`` naming ``what`` and the place
    (``plates``, ``given``: as ``log_multinomial``) rather than turned into NaN."""
    n = np.asarray(n, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    n_b, k_b = np.broadcast_arrays(n, k)
    no_trials = _given(~(n_b >= 0.0), given)  # also catches NaN
    if np.any(no_trials):
        at, where = _first(no_trials, plates)
        raise CemDataError(f"{what}: expected numbers of trials ≥ 0, found {n_b[at]:g}{where}")
    bad = _given(~((0.0 <= k_b) & (k_b <= n_b)), given)  # also catches NaN
    if np.any(bad):
        at, where = _first(bad, plates)
        raise CemDataError(
            f"{what}: expected successes between 0 and the number of trials, found "
            f"{k_b[at]:g} successes in {n_b[at]:g} trials{where}")
    out = -np.log1p(n) - _sps.betaln(n - k + 1.0, k + 1.0)
    return out[()] if out.ndim == 0 else out


def _cholesky(M, name: str) -> np.ndarray:
    M = np.asarray(M, dtype=np.float64)
    if M.ndim < 2 or M.shape[-1] != M.shape[-2]:
        raise CemDataError(f"{name}: expected a square matrix, found shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise CemDataError(f"{name}: expected a finite positive-definite matrix, found NaN or inf")
    try:
        return np.linalg.cholesky(0.5 * (M + np.swapaxes(M, -1, -2)))
    except np.linalg.LinAlgError:
        smallest = float(np.min(np.linalg.eigvalsh(0.5 * (M + np.swapaxes(M, -1, -2)))))
        raise CemDataError(
            f"{name}: expected a positive-definite matrix, found one with smallest eigenvalue "
            f"{smallest:.6g}"
        ) from None


def logdet(M, name: str = "matrix"):
    """log |M| of a (batch of) symmetric positive-definite matrices."""
    L = _cholesky(M, name)
    out = 2.0 * np.sum(np.log(np.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
    return out[()] if out.ndim == 0 else out


def inv(M, name: str = "matrix") -> np.ndarray:
    """M⁻¹ of a (batch of) square matrices; symmetric input gives an exactly symmetric result."""
    M = np.asarray(M, dtype=np.float64)
    if M.ndim < 2 or M.shape[-1] != M.shape[-2]:
        raise CemDataError(f"{name}: expected a square matrix, found shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise CemDataError(f"{name}: expected a finite invertible matrix, found NaN or inf")
    try:
        out = np.linalg.inv(M)
    except np.linalg.LinAlgError:
        raise CemDataError(f"{name}: expected an invertible matrix, found a singular one") from None
    swapped = np.swapaxes(M, -1, -2)
    if np.array_equal(M, swapped):
        out = 0.5 * (out + np.swapaxes(out, -1, -2))
    return out


def multigammaln(a, D: int):
    """log Γ_D(a) = D(D-1)/4 log π + Σ_{j=1..D} log Γ(a + (1-j)/2), elementwise in ``a``."""
    a = np.asarray(a, dtype=np.float64)
    j = np.arange(D, dtype=np.float64)
    out = 0.25 * D * (D - 1) * _LOG_PI + np.sum(_sps.gammaln(a[..., None] - 0.5 * j), axis=-1)
    return out[()] if out.ndim == 0 else out


def wishart_lognorm(nu, W, name: str = "Wishart scale matrix",
                    dof: str = "Wishart degrees of freedom"):
    """log of the Wishart normaliser: (νD/2) log 2 + (ν/2) log|W| + log Γ_D(ν/2); ``name``
    and ``dof`` say what W and ν are in a refusal (the hyperparameters they were given as)."""
    W = np.asarray(W, dtype=np.float64)
    D = W.shape[-1] if W.ndim >= 2 else 0
    nu = np.asarray(nu, dtype=np.float64)
    if not np.all(np.isfinite(nu)) or np.any(nu <= D - 1):
        raise CemDataError(
            f"{dof}: expected ν > D - 1 = {D - 1}, found {np.min(nu) if nu.size else nu}"
        )
    out = 0.5 * nu * D * _LOG_2 + 0.5 * nu * logdet(W, name) + multigammaln(0.5 * nu, D)
    return out[()] if np.ndim(out) == 0 else out
