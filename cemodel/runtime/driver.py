"""Pieces of the fitting loop shared by every generated module."""

from __future__ import annotations

import warnings
import zipfile
import zlib
from dataclasses import dataclass, field

import numba
import numpy as np

from ..errors import CemDataError, CemError, did_you_mean
from .numeric import LOG_ZERO


class ElboDecreaseWarning(UserWarning):
    """A mean-field iteration lowered the ELBO: a sign of a wrong update."""


@dataclass
class FitResult:
    """What ``fit`` returns: posterior parameters, expectations and the ELBO trace."""

    posterior: dict[str, np.ndarray]
    elbo: np.ndarray
    iterations: int
    converged: bool
    seconds: float
    dims: dict[str, int] = field(default_factory=dict)
    hypers: dict[str, object] = field(default_factory=dict)
    state: dict[str, np.ndarray] = field(default_factory=dict)  # natural parameters
    notes: dict[str, object] = field(default_factory=dict)  # method-specific counts
    # observed entries that were missing: their indices and q (runtime/missing.py)
    missing: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def __getitem__(self, key: str) -> np.ndarray:
        try:
            return self.posterior[key]
        except (KeyError, TypeError):
            hint = did_you_mean(str(key), self.posterior) if isinstance(key, str) else None
            raise KeyError(f"no {key!r} in the fit's posterior{'; ' + hint if hint else ''} "
                           f"(it holds: {', '.join(self.posterior)})") from None

    def keys(self):
        """The names ``result[name]`` reads: each variable's posterior parameters
        (``"mu.mean"``, ``"p.a"``) and expectations (``"E[log beta]"``)."""
        return self.posterior.keys()

    def __contains__(self, key: object) -> bool:
        return key in self.posterior


def check_elbo_increase(trace: list[float], warn: bool, rtol: float = 1e-9,
                        resumed=None) -> None:
    """Warn loudly when the last coordinate-ascent iteration lowered the ELBO; at the first
    iteration resumed from the checkpoint ``resumed``, a fall is that file's (its state does
    not match its trace: it was changed after it was written), an error naming it."""
    if len(trace) < 2 or not (warn or resumed is not None):
        return
    before, after = trace[-2], trace[-1]
    # a floor of 1e-5 nats: an ELBO that is a difference of huge terms (a hyperparameter of
    # 1e8) carries that much round-off, far below anything a fit could mean by a decrease
    fell = after < before - max(rtol * abs(before), 1e-5)
    if fell and resumed is not None:
        raise damaged_checkpoint(resumed, f"its state does not continue its ELBO trace (the "
                                          f"next iteration goes from {before:.10g} to "
                                          f"{after:.10g})")
    if fell:
        warnings.warn(
            f"the ELBO decreased at iteration {len(trace) - 1}: {before:.10g} -> {after:.10g}. "
            "Mean-field updates never lower it; this is a bug in cemodel. Please report it "
            "with the model file.",
            ElboDecreaseWarning,
            stacklevel=3,
        )


def check_possible(elbo: float, log_data: tuple[str, ...]) -> None:
    """Refuse data the model gives probability 0: a positive count whose rate has a known
    factor of 0 (an exposure, a loading) adds count · log 0 = count · rt.LOG_ZERO to the
    ELBO, which no fit of possible data comes near. ``log_data``: where the zeros are, as
    the message shows them ("'x' holds zeros (the first at [3, 0])", or the names)."""
    if elbo <= LOG_ZERO / 2:
        raise CemDataError(
            f"the data have probability 0 under the model: a positive count meets a rate "
            f"with a known factor of 0 (data {', '.join(log_data)})",
            hint="a count can be positive only where its rate can: drop those observations "
                 "or correct the zeros")


def converged(trace: list[float], tol: float) -> bool:
    """Relative change of the ELBO below ``tol``."""
    if len(trace) < 2:
        return False
    before, after = trace[-2], trace[-1]
    return abs(after - before) <= tol * max(1.0, abs(after))


def max_length(ptr: np.ndarray) -> int:
    """The longest segment of a CSR offset array (sizes per-item scratch arrays)."""
    if len(ptr) < 2:
        return 0
    return int(np.max(np.diff(ptr)))


def load_state(init: dict, arrays: dict[str, np.ndarray]) -> None:
    """Copy natural parameters from ``init`` (an earlier result's ``state``) into ``arrays``."""
    if hasattr(init, "state"):
        init = init.state
    for name, target in arrays.items():
        if name not in init:
            raise CemDataError(f"init: missing '{name}'; pass the `state` of an earlier fit "
                               "of the same model")
        value = np.asarray(init[name], dtype=float)
        if value.shape != target.shape:
            raise CemDataError(f"init '{name}': expected shape {target.shape}, found {value.shape}")
        if not np.all(np.isfinite(value)):
            raise CemDataError(f"init '{name}': expected finite values, found NaN or inf")
        target[...] = value



class State:
    """The arrays and sizes a generated fit passes to its kernels (attribute access)."""

    def __init__(self, **values: object) -> None:
        self.__dict__.update(values)


def effective_size(effective_batch_size, step: int, batch: int) -> float:
    """M_t for SVI+: a number, or a function of the step (e.g. ``lambda t: 50 * (t + 1)``),
    capped at the batch size (M = |S| is plain SVI)."""
    value = effective_batch_size(step) if callable(effective_batch_size) else effective_batch_size
    value = float(value)
    if not value > 0:
        raise CemDataError(f"effective_batch_size: expected a positive number, found {value!r}")
    return min(value, float(batch))


def annealing_weights(rng: np.random.Generator, batch: int, size_m: float) -> np.ndarray:
    """SVI+ (Paisley, Definition 1): 1 + ε_n − ε̄ with ε_n ~ N(0, |S|/M − 1).

    With M = |S| the variance is zero and no random number is drawn: plain SVI."""
    variance = batch / size_m - 1.0
    if variance <= 0.0:
        return np.ones(batch)
    eps = rng.normal(0.0, np.sqrt(variance), batch)
    return 1.0 + eps - eps.mean()


def invalid_step(step: int, effective_batch_size, cause: Exception | None = None,
                 variable: str | None = None) -> Exception:
    """A stochastic step left a posterior's domain (e.g. a scale matrix not positive-definite):
    q(``variable``) where it is known. Without annealing noise a data error of the runtime
    (data on a scale too far from the prior's, found by its positive-definiteness check) is
    the cause and is reported as such."""
    if effective_batch_size is None and isinstance(cause, CemDataError):
        return cause
    what = f"q({variable})" if variable is not None else "a global posterior"
    if effective_batch_size is not None:
        return CemError(
            f"SVI+ step {step}: the annealing noise moved {what} outside its domain "
            "(a natural parameter that is not valid for its family)",
            hint="use a larger effective_batch_size (less noise) or a smaller step "
                 "(larger tau, smaller step_scale)")
    return CemError(
        f"SVI step {step}: {what} left its domain",
        hint="use a smaller step (larger tau, smaller step_scale) or a larger batch_size")


def check_step(expectations: dict[str, np.ndarray], step: int, effective_batch_size,
               naturals: tuple = (), variable: str | None = None) -> None:
    """Every global expectation is finite after a stochastic step, and every natural
    parameter in its family's domain (``naturals``: (family, λ arrays) pairs; digamma of a
    negative Dirichlet parameter is finite, so finiteness alone does not show it), or a clear
    error, naming ``variable`` when the arrays are one variable's. The domains are
    ``ssvi.in_domain``'s (a box per statistic, for the Normal-Gamma also a positive rate,
    for MVN, Wishart and Normal-Wishart positive definite matrices)."""
    from .special import all_finite
    from .ssvi import all_in_domain

    for array in expectations.values():
        if not all_finite(np.asarray(array, dtype=float)):
            raise invalid_step(step, effective_batch_size, variable=variable)
    for family, lams in naturals:
        if not all_in_domain(family, lams):
            if effective_batch_size is None and family in ("mvn", "wishart", "normal_wishart"):
                # a convex step between valid matrices is valid: only cancellation (data
                # on a scale far from the prior's) makes it indefinite in floating point
                from .special import _NOT_POSITIVE_DEFINITE
                where = f"q({variable}): " if variable is not None else ""
                raise CemDataError(f"SVI step {step}: {where}{_NOT_POSITIVE_DEFINITE}")
            raise invalid_step(step, effective_batch_size, variable=variable)


class NoisyStop:
    """Stopping for stochastic fits: never on one noisy value.

    The objective (one value per evaluation) is smoothed by a moving average over ``window``
    evaluations; the fit stops when the smoothed value has not improved by more than
    ``tol`` (relative) for ``patience`` evaluations in a row."""

    def __init__(self, window: int = 3, patience: int = 3, tol: float = 1e-4) -> None:
        if window < 1 or patience < 1:
            raise CemDataError(f"stopping rule: expected window >= 1 and patience >= 1, found "
                               f"window={window}, patience={patience}")
        self.window, self.patience, self.tol = window, patience, tol
        self.values: list[float] = []
        self.best = -np.inf
        self.stale = 0

    def update(self, value: float) -> bool:
        """Record one evaluation; True when the fit should stop."""
        self.values.append(value)
        if len(self.values) < self.window:
            return False
        smoothed = float(np.mean(self.values[-self.window:]))
        improved = (not np.isfinite(self.best)
                    or smoothed > self.best + self.tol * max(1.0, abs(self.best)))
        if improved:
            self.best, self.stale = smoothed, 0
            return False
        self.stale += 1
        return self.stale >= self.patience


def check_learn(learn, learnable: tuple[str, ...]) -> tuple[str, ...]:
    """The hyperparameters to learn, each one the model can learn, or a clear error."""
    if isinstance(learn, str):
        learn = tuple(x.strip() for x in learn.split(",") if x.strip())
    learn = tuple(learn or ())
    for name in learn:
        if name not in learnable:
            raise CemDataError(
                f"learn: '{name}' cannot be learned in this model; learnable: "
                f"{', '.join(learnable) or 'none'}",
                hint=did_you_mean(name, learnable) or "a learnable hyperparameter is the "
                "symmetric concentration of a Dirichlet, the shape or rate of a Gamma or a "
                "parameter of a Beta, used once")
    return learn


def check_applies(kind: str, choice: str, table: dict[str, str]) -> str:
    """``choice`` if ``table`` (a method or local step -> "yes: why" / "no: why", as
    LOCAL_STEPS and the plan's methods hold them) allows it, else a clear error with the
    reason."""
    if choice not in table:
        raise CemDataError(f"{kind}: expected one of {', '.join(table)}, found {choice!r}",
                           hint=did_you_mean(str(choice), tuple(table)))
    why = table[choice]
    if not why.startswith("yes"):
        raise CemDataError(f"{kind} {choice!r} does not apply to this model: "
                           f"{why.removeprefix('no: ')}")
    return choice


def check_local_step(local_step: str, local_steps: dict[str, str]) -> str:
    """The local step to run, one that applies to the model, or a clear error with the reason."""
    return check_applies("local step", local_step, local_steps)


def check_sweeps(sweeps: int, burn_in: int) -> None:
    """Gibbs: at least one sweep is kept after burn-in."""
    if not 0 <= int(burn_in) < int(sweeps):
        raise CemDataError(f"gibbs_burn_in: expected 0 <= burn-in < gibbs_sweeps = {sweeps}, "
                           f"found {burn_in}")


@numba.njit
def seed_kernels(seed: int) -> None:
    """Seed the random stream numba kernels draw from (np.random inside @njit code)."""
    np.random.seed(seed)


# -- checkpoints -----------------------------------------------------------------------------
# A checkpoint holds everything a fit changes (every State value that is not bound data) and
# its progress (iteration or epoch, trace, random-stream states), so a resumed fit continues
# the same trajectory. It is written to a temporary file, flushed to disk and renamed over
# the previous one: a crash or SIGKILL at any moment leaves the previous checkpoint intact.


def _data_fingerprint(s: State) -> str:
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(s.bound.arrays):
        array = np.ascontiguousarray(s.bound.arrays[name])
        digest.update(name.encode())
        digest.update(str(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _fit_values(s: State) -> dict[str, object]:
    data = {id(a) for a in s.bound.arrays.values()}
    return {name: value for name, value in vars(s).items()
            if name != "bound" and id(value) not in data
            and isinstance(value, (np.ndarray, float, int, np.floating, np.integer))}


def _checkpoint_values(s: State, source, keep) -> tuple[dict[str, object], str]:
    """The values a checkpoint holds and the fingerprint of its data: everything of ``s`` and
    its bound data, or out of core (``source`` an ItemSource) the scalars and the arrays named
    in ``keep`` (the globals: ``s`` holds one minibatch) and the source's fingerprint."""
    values = _fit_values(s)
    if source is None:
        return values, _data_fingerprint(s)
    return ({k: v for k, v in values.items() if not isinstance(v, np.ndarray) or k in keep},
            source.fingerprint())


def save_checkpoint(path, s: State, source_sha: str, method: str, *, source=None, keep=(),
                    **progress) -> None:
    """Write the fit's state and progress to ``path`` atomically (temporary file, fsync,
    rename). ``progress`` values must be JSON-serialisable (trace lists, counters, the
    ``bit_generator.state`` dicts of numpy generators). Out of core, ``source`` is the
    ItemSource and ``keep`` the arrays to save (see _checkpoint_values)."""
    import json

    from ..files import write_npz

    values, fingerprint = _checkpoint_values(s, source, keep)
    meta = {"source_sha256": source_sha, "method": method, "data": fingerprint,
            "progress": progress, "scalars": {k: float(v) for k, v in values.items()
                                              if not isinstance(v, np.ndarray)}}
    arrays = {f"state.{k}": v for k, v in values.items() if isinstance(v, np.ndarray)}
    write_npz(path, {"meta": np.array(json.dumps(meta)), **arrays}, sync=True)


def load_checkpoint(path, s: State, source_sha: str, method: str, *, source=None,
                    keep=(), needs: dict[str, type] | None = None, scratch=()) -> dict:
    """Restore a checkpoint into ``s`` (in place) and return its progress; refuses one from
    another model, another fitting method or other data, with the reason, and a file that
    is not a whole checkpoint (truncated, damaged) naming it (``source``, ``keep``: as
    save_checkpoint; ``needs``: the progress entries the driver reads and their types).
    ``scratch`` (ROLES 'thread': one row per thread, rewritten by every local step) is not
    restored, so a fit checkpointed with 2 threads resumes with 1."""
    meta, arrays = _read_checkpoint(path)
    arrays = {name: value for name, value in arrays.items() if name not in scratch}
    if meta["source_sha256"] != source_sha:
        raise CemDataError(f"resume: {path} was written by another model (source sha256 "
                           f"{meta['source_sha256'][:12]}, this model {source_sha[:12]})")
    if meta["method"] != method:
        raise CemDataError(f"resume: {path} is a checkpoint of {meta['method']}, not {method}")
    if meta["data"] != _checkpoint_values(s, source, keep)[1]:
        raise CemDataError(f"resume: the data differ from those {path} was fitted to")
    progress = meta["progress"]
    for name, kind in (needs or {}).items():
        if not isinstance(progress.get(name), kind) or isinstance(progress[name], bool):
            raise damaged_checkpoint(path, f"its progress has no {kind.__name__} '{name}'")
    if not all(isinstance(v, (int, float)) for v in progress.get("trace", [])):
        raise damaged_checkpoint(path, "its ELBO trace holds values that are not numbers")
    for name, value in arrays.items():
        current = getattr(s, name, None)
        if not isinstance(current, np.ndarray) or current.shape != value.shape:
            found = getattr(current, "shape", None)
            raise CemDataError(f"resume: {path} was written by this model with other sizes "
                               f"({name}: {value.shape} in the checkpoint, {found} here)")
        if value.dtype.kind not in "biuf" or (value.dtype.kind == "f") != (
                current.dtype.kind == "f"):
            raise damaged_checkpoint(path, f"'{name}' holds {value.dtype}, the fit {current.dtype}")
    for name, value in meta["scalars"].items():
        if not isinstance(value, (int, float)) or not isinstance(
                getattr(s, name, None), (float, int, np.floating, np.integer)):
            raise damaged_checkpoint(path, f"the scalar '{name}' is not one of this fit's")
    for name, value in arrays.items():
        getattr(s, name)[...] = value
    for name, value in meta["scalars"].items():
        current = getattr(s, name)
        setattr(s, name, type(current)(value))
    return progress


# options a checkpoint records since a later version: one written before still resumes
RECORDED_LATER = frozenset({"seed"})


def check_same_trajectory(path, saved: dict | None, current: dict) -> None:
    """A checkpoint continues one trajectory: the options that shape it (the step sizes, the
    minibatch, the method's kind of step, the local step) must be those it was written with.
    ``saved`` is None for a checkpoint written before they were recorded (not checked)."""
    if saved is None:
        return
    names = [name for name, value in current.items() if saved.get(name) != value
             and (name in saved or name not in RECORDED_LATER)]
    differ = [f"{name} {saved.get(name)!r} there, {current[name]!r} here" for name in names]
    if differ:
        hint = ("resume with the method and options of the fit that wrote it (only the number "
                "of epochs or iterations may grow)")
        if "batch_size" in names and {"kappa", "tau"} & set(names):
            hint += ("; kappa and tau, when not given, follow from the batch size (a batch "
                     "that is a large share of the data takes the small-data schedule)")
        raise CemDataError(f"resume: {path} was written with other options: "
                           f"{'; '.join(differ)}", hint=hint)


def damaged_checkpoint(path, what: str) -> CemDataError:
    """The error of a checkpoint that is not whole, naming it and what is wrong."""
    return CemDataError(f"resume: cannot read the checkpoint {path}: {what}",
                        hint="the file is damaged or not a checkpoint cemodel wrote; start "
                             "the fit again without --resume")


# what reading a damaged .npz raises: a cut archive (EOFError, BadZipFile), a flipped byte
# (a CRC or header error, an unknown compression method), text that is not JSON (ValueError)
_UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error,
               NotImplementedError, OverflowError)
_META = {"source_sha256": str, "method": str, "data": str, "progress": dict, "scalars": dict}


def _read_checkpoint(path) -> tuple[dict, dict[str, np.ndarray]]:
    """The meta record and the state arrays of the checkpoint ``path``, checked for form."""
    import json

    try:
        # our handle: numpy leaves its own open when the file is not an archive
        with open(path, "rb") as handle:
            # numpy reads anything that is neither a zip nor an .npy as a pickle, and says
            # so ("load it unsafely using allow_pickle="): not a checkpoint, said plainly
            if not handle.read(6).startswith((b"PK\x03\x04", b"\x93NUMPY")):
                raise damaged_checkpoint(path, "it is not a NumPy archive (.npz)")
            handle.seek(0)
            archive = np.load(handle, allow_pickle=False)
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise damaged_checkpoint(path, "it holds one array, not a checkpoint's archive")
            if "meta" not in archive.files:
                raise damaged_checkpoint(path, "it has no 'meta' record")
            meta = json.loads(str(archive["meta"]))
            arrays = {k.removeprefix("state."): archive[k] for k in archive.files
                      if k.startswith("state.")}
    except FileNotFoundError:
        raise CemDataError(f"resume: cannot read the checkpoint {path}: no such file") from None
    except _UNREADABLE as exc:
        raise damaged_checkpoint(path, str(exc) or type(exc).__name__) from None
    if not isinstance(meta, dict):
        raise damaged_checkpoint(path, "its 'meta' record is not a mapping")
    for key, kind in _META.items():
        if not isinstance(meta.get(key), kind):
            raise damaged_checkpoint(path, f"its 'meta' record has no {kind.__name__} '{key}'")
    return meta, arrays


def restore_generator(rng: np.random.Generator, state: dict) -> None:
    """Put a numpy Generator back in a saved ``bit_generator.state``."""
    rng.bit_generator.state = state


def thread_count() -> int:
    """Threads the generated local step shares its items among: numba's current setting
    (NUMBA_NUM_THREADS, or numba.set_num_threads; `cemodel fit --threads N`)."""
    return int(numba.get_num_threads())


# the data entries (the bound arrays' sizes) a share of the local step needs: below
# 2 × this, one share. A 2,000-point 2-D mixture (4,000 entries) holds ~1 ms of work per local
# step, where handing half of it to a second thread stops paying, and on a busy machine its
# two shares ran slower than one (benchmarks/RESULTS.md, "Threads on a busy machine")
ENTRIES_PER_SHARE = 16384


def share_count(bound) -> int:
    """How many shares the local step splits the items into: one per thread
    (``thread_count``), fewer for small data (one per ENTRIES_PER_SHARE data entries, at
    least one). Fixed when the fit is prepared; the numbers depend on it (the shares' sums
    are added in share order), not on whether the shares ran in threads."""
    entries = sum(int(np.size(a)) for a in bound.arrays.values())
    return max(1, min(thread_count(), entries // ENTRIES_PER_SHARE))


def thread_copies(n_threads: int, total: np.ndarray) -> np.ndarray:
    """The local step's statistics per share, zero (axis 0: the share). One share adds
    straight into ``total`` (a view of it: nothing to zero or add up, ``run_shares``)."""
    if n_threads == 1:
        return total[None]
    return np.zeros((n_threads,) + total.shape)


def per_thread(n_threads: int, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """A zeroed copy of each array per thread of the local step (axis 0: the thread)."""
    return tuple(np.zeros((n_threads,) + a.shape) for a in arrays)
