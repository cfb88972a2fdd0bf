"""What a generated module provides to the fitting drivers: the model's side of the seam.

A generated module (``cemodel compile``) is the model: its data layout (``SPEC``), its kernels,
its constants and its start. The drivers in this package are the algorithms, the same for
every model (as stanc3's generated C++ is a model class and NUTS lives in the Stan library).
They call only the names below; ``tests/test_drivers.py`` implements them in plain numpy.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ...errors import CemDataError
from ..driver import FitResult, State
from ..driver import check_possible as check_possible_elbo
from ..numeric import LOG_ZERO


@dataclass(frozen=True)
class Global:
    """One global factor q(β) as the stochastic drivers move it.

    ``lam``: the state names of its natural-parameter arrays (coefficient form), ``E``: those
    of its expected statistics, in the family's order; ``update(s, data_scale, expect=True)``
    sets λ = η + data_scale · (its messages from the statistics) and, with ``expect``, E[t];
    ``aux_draws``: how many auxiliary draws SSVI's V(β, λ) needs (0: no V for this family);
    ``after_sample(s)``: refreshes the copies of E[t] the kernels read (exp(E[log β])) after a
    draw has been written into ``E``; ``lazy``: its columns layout (``drivers.lazy``).
    """

    name: str
    family: str
    lam: tuple[str, ...]
    E: tuple[str, ...]
    update: Callable[..., None]
    aux_draws: int = 0
    after_sample: Callable[[State], None] | None = None
    lazy: Any = None  # an rt.LazyColumns: SVI may move it by the minibatch's columns

    def lams(self, s: State) -> tuple[np.ndarray, ...]:
        return tuple(getattr(s, name) for name in self.lam)

    def expectations(self, s: State) -> tuple[np.ndarray, ...]:
        return tuple(getattr(s, name) for name in self.E)


class ModelInterface(Protocol):
    """The names a generated module provides (see ``cemodel.codegen.interface``)."""

    SOURCE_SHA256: str
    SPEC: dict[str, Any]  # the data layout the binder checks against
    METHODS: dict[str, str]  # method -> 'yes' or 'no: why'
    LOCAL_STEPS: dict[str, str]  # E-step -> 'yes: ...' or 'no: why'
    LEARNABLE: tuple[str, ...]
    DATA_PLATE: str | None
    STREAMING: str  # 'yes' or 'no: why' (fit_svi from an rt.ItemSource)
    ITEM_DIMS: tuple[str, ...]
    GLOBALS: tuple[Global, ...]
    ROLES: dict[str, tuple[str, ...]]  # role (data, global, statistic, ...) -> state arrays
    DEFAULT_START: str  # 'seeds', 'random' or 'prior': the start when none is asked

    def _prepare(self, data: Any, hypers: Any, dims: Any, seed: int, init: Any, start: Any,
                 max_local_iter: int, local_tol: float, share: State | None = None,
                 ) -> State: ...

    def _result(self, s: State, trace: list[float], converged: bool, seconds: float,
                items: bool = True) -> FitResult: ...

    def _learn(self, s: State, learn: tuple[str, ...], rho: float = 1.0,
               items: Any = ...) -> None: ...

    def run_local_step(self, s: State, items: np.ndarray, max_local_iter: int,
                       local_tol: float, seeding: bool = False, warm: bool = False,
                       guard: bool = False, evaluate: bool = True,
                       accelerate: bool = False) -> float: ...

    def run_local_step_gibbs(self, s: State, items: np.ndarray, sweeps: int,
                             burn_in: int) -> float: ...

    def run_local_step_cvb0(self, s: State, items: np.ndarray, max_local_iter: int,
                            local_tol: float) -> float: ...

    def refresh(self, s: State) -> None: ...

    # only beside a global with a ``lazy`` layout: refresh's part for the other globals
    def refresh_eager(self, s: State) -> None: ...

    def elbo_of_globals(self, s: State) -> float: ...

    # only where ROLES has 'entry_statistic': the part of elbo_of_globals through them
    def elbo_of_entries(self, s: State) -> float: ...


STATISTICS = ("statistic", "entry_statistic")


def zero_statistics(model: ModelInterface, s: State, roles: tuple[str, ...] = STATISTICS,
                    skip: frozenset[str] = frozenset()) -> None:
    """Zero the sufficient statistics (ROLES 'statistic' and 'entry_statistic') the local
    step adds to, but those in ``skip`` (a lazy step zeroes its own rows of them)."""
    for role in roles:
        for name in model.ROLES.get(role, ()):
            if name not in skip:
                getattr(s, name)[...] = 0.0


def given_hypers(model: ModelInterface, s: State) -> dict[str, Any]:
    """The hyperparameters a fit starts from (JSON values): what a checkpoint records, so
    that a resumed fit given others is refused instead of continuing with the saved ones."""
    return {name: np.asarray(getattr(s, name)).tolist()
            for name in model.ROLES.get("hyper", ())}


def kept_locals(model: ModelInterface) -> tuple[str, ...]:
    """The per-item arrays a warm start continues from (the kept locals' q)."""
    return tuple(model.ROLES.get("kept_local", ()))


def check_possible(model: ModelInterface, elbo: float, s: State | None = None) -> None:
    """Where covariates enter through their log (SPEC: nonnegative), refuse data of
    probability 0: a positive count where its rate has a known factor of 0. With the state
    ``s``, the message names the covariates that hold a zero, and where the first is."""
    logged = tuple(name for name, spec in model.SPEC["covariates"].items()
                   if spec.get("nonnegative"))
    if not logged or elbo > LOG_ZERO / 2:
        return
    zeros = []
    if s is not None:
        for name in logged:
            values = np.asarray(getattr(s, name, np.nan))
            if values.size and np.any(values == 0.0):
                at = ", ".join(str(int(i)) for i in np.argwhere(values == 0.0)[0])
                zeros.append(f"'{name}' holds zeros (the first at [{at}])" if at
                             else f"'{name}' is 0")
    # without the state, or where its arrays are a minibatch's, every covariate logged
    named = tuple(zeros) if zeros else (", ".join(f"'{n}'" for n in logged) + " hold zeros",)
    check_possible_elbo(elbo, named)


def check_finite(model: ModelInterface, s: State, elbo: float, where: str) -> None:
    """Stop a fit whose state is no longer finite: a NaN or infinite ELBO or global posterior
    is never a result. Cheap while all is well (one float and the globals' arrays); on a
    failure, a ``CemDataError`` naming ``where`` (``iteration 3``) and the first variable, in
    update order, that holds NaN or inf: a global (the drivers' ``GLOBALS`` order) or, when
    every global is finite, the first local of the fit's posterior. Data of probability 0
    (an ELBO of -inf where a count meets a known zero rate) keep their own message."""
    bad = next((g.name for g in model.GLOBALS if not _finite(g.lams(s) + g.expectations(s))),
               None)
    if bad is None and math.isfinite(elbo):
        return
    check_possible(model, elbo, s)
    what = f"q({bad})" if bad is not None else _nonfinite_local(model, s)
    raise CemDataError(
        f"the fit stopped at {where}: {what} is not finite (NaN or inf), so there is no "
        "posterior to report",
        hint="the values met a limit of double precision: rescale the data (or the "
             "hyperparameters with them) towards 1, or choose hyperparameters nearer 1")


def _finite(arrays: tuple[np.ndarray, ...]) -> bool:
    return all(np.isfinite(a).all() for a in arrays)


def _nonfinite_local(model: ModelInterface, s: State) -> str:
    """``q(name)`` of the first variable of the fit's posterior with a NaN or inf (called when
    every global is finite: a local's), else ``the ELBO``."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        posterior = model._result(s, [], False, 0.0).posterior
    for key, value in posterior.items():
        if not np.all(np.isfinite(np.asarray(value, dtype=float))):
            name = key[2:-1].split()[-1] if key.startswith("E[") else key.split(".")[0]
            return f"q({name})"
    return "the ELBO"


class ModelView:
    """A generated module's namespace as the drivers see it (attribute access, live): what
    its entry points pass, so that a module imported any way (not registered in
    ``sys.modules``) still hands the drivers itself."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.__dict__ = namespace

    def __repr__(self) -> str:
        return f"<model {self.__dict__.get('SOURCE', '?')}>"
