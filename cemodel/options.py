"""The values a user gives cemodel, each with one rule: the fitting options, the ``--set``
settings and the hyperparameters.

One table for everyone who reads them: the drivers check their keyword arguments with
``check_options`` (the Python API, the generated modules' entry points and the Dask layer
all reach the drivers), and the command line builds its argparse types from the same rules
(``Rule.parse``), so ``--max-iter 0`` and ``fit(max_iter=0)`` are refused with the same
words: the option, what it takes and what was found.

    RULES["max_iter"].check(0)    # CemOptionError: max_iter: expected a whole number >= 1, found 0
    RULES["tau"].parse("-20")     # CemOptionError: expected a finite number >= 0, found '-20'

Checking is a few comparisons per option, once per fit; nothing is converted, so a valid
value reaches the fit exactly as given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from types import MappingProxyType
from typing import Any

import numpy as np

from .errors import CemOptionError

__all__ = ["HYPER_LARGEST", "HYPER_SMALLEST", "RULES", "Rule", "check_hyper_values",
           "check_options", "check_setting", "check_workers", "setting_number"]


@dataclass(frozen=True)
class Rule:
    """One option: a whole number (``whole``) or a finite real, at least ``low`` (above it when
    ``above``) and at most ``high``; ``none`` says what None means where it is allowed."""

    name: str
    whole: bool
    low: float | None = None
    high: float | None = None
    above: bool = False
    none: str | None = None
    note: str | None = None  # what a value means, where it is not plain (tol < 0: never stop)

    @property
    def flag(self) -> str:
        """The command line's spelling: ``--max-iter``."""
        return "--" + self.name.replace("_", "-")

    @property
    def expected(self) -> str:
        """What the option takes, in words: ``a whole number >= 1 (or None: ...)``."""
        return self.number + (f" (or None: {self.none})" if self.none else "")

    @property
    def number(self) -> str:
        """The numbers the option takes, in words: ``a whole number >= 1``."""
        what = "a whole number" if self.whole else "a finite number"
        if self.low is not None and self.high is not None:
            text = f"{what.replace('finite ', '')} from {_show(self.low)} to {_show(self.high)}"
        elif self.low is not None:
            text = f"{what} {'>' if self.above else '>='} {_show(self.low)}"
        elif self.high is not None:
            text = f"{what} <= {_show(self.high)}"
        else:
            text = what
        return text + (f" ({self.note})" if self.note else "")

    def check(self, value: Any) -> Any:
        """``value`` unchanged when the rule allows it, else a ``CemOptionError`` that names
        the option, what it takes and what was found."""
        if value is None and self.none:
            return value
        if not self._allows(value):
            raise CemOptionError(f"{self.name}: expected {self.expected}, found {_found(value)}")
        return value

    def parse(self, text: str) -> int | float:
        """A command-line value: the number ``text`` spells, if the rule allows it."""
        try:
            value: int | float = int(text) if self.whole else float(text)
        except ValueError:
            raise CemOptionError(f"expected {self.number}, found {text!r}") from None
        if not self._allows(value):
            raise CemOptionError(f"expected {self.number}, found {text!r}")
        return value

    def _allows(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)):
            return False
        if self.whole and not isinstance(value, Integral):
            return False
        if not isinstance(value, Real) or not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or value <= self.high


def _show(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def _found(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


SEED_LARGEST = 2**32 - 1

RULES: Mapping[str, Rule] = MappingProxyType({rule.name: rule for rule in (
    # how long a fit runs, and when it stops
    Rule("max_iter", whole=True, low=1),
    Rule("epochs", whole=True, low=1),
    Rule("tol", whole=False, note="below 0: never stop early"),
    Rule("starts", whole=True, low=1),  # MF: random starts tried, the best continued
    Rule("trial_iter", whole=True, low=1, none="5 iterations"),
    Rule("gtol", whole=False, note="below 0: never stop early"),
    Rule("window", whole=True, low=1),
    Rule("patience", whole=True, low=1),
    # the stochastic step: minibatches and rho_t = step_scale * (t + tau)^-kappa, t = 1, 2...
    Rule("batch_size", whole=True, low=1, none="all the items"),
    Rule("effective_batch_size", whole=False, low=0, above=True),
    Rule("kappa", whole=False, low=0, high=1),  # rho_t never grows; the steps sum to infinity
    Rule("tau", whole=False, low=0),
    Rule("step_scale", whole=False, low=0, above=True),
    # the local step
    Rule("max_local_iter", whole=True, low=1),
    Rule("local_tol", whole=False, note="below 0: always max_local_iter sweeps"),
    Rule("gibbs_sweeps", whole=True, low=1),
    Rule("gibbs_burn_in", whole=True, low=0, none="half the sweeps"),
    # everything else
    Rule("seed", whole=True, low=0, high=SEED_LARGEST),
    Rule("checkpoint_every", whole=True, low=1),
    Rule("partitions", whole=True, low=1, none="one per thread of the Dask cluster"),
    Rule("retries", whole=True, low=0),
    Rule("top", whole=True, low=1),
    Rule("draws", whole=True, low=1),  # posterior predictive and held-out scores
)})


def check_options(**values: Any) -> None:
    """Check each keyword against its rule (None passes only where the rule allows it; a
    name without a rule is not checked here)."""
    for name, value in values.items():
        rule = RULES.get(name)
        if rule is not None:
            rule.check(value)


# -- settings and hyperparameters --------------------------------------------------------------
# A hyperparameter's entries are 0 or within [HYPER_SMALLEST, HYPER_LARGEST] in magnitude:
# the priors and the updates multiply, square and invert them (a Dirichlet's K * alpha, a
# Gamma's mean a / b, a covariance inv(c * I)), and inside this range each of those stays a
# finite double (1e150 squared is 1e300). Outside it a prior cannot be represented: alpha =
# 1e308 made every array of a Poisson mixture's fit NaN, and a rate of 1e-320 an infinite mean.

HYPER_LARGEST = 1e150
HYPER_SMALLEST = 1e-150
HYPER_RANGE = ("0 or a magnitude from 1e-150 to 1e150, so that the prior's products, squares "
               "and reciprocals stay finite")


def check_hyper_values(label: str, values: np.ndarray) -> None:
    """Refuse a hyperparameter (``values``: its finite float entries) whose prior cannot be
    represented in double precision (see HYPER_RANGE), naming the first entry outside."""
    size = np.abs(values)
    outside = (size > HYPER_LARGEST) | ((size < HYPER_SMALLEST) & (size > 0))
    if np.any(outside):
        at = np.unravel_index(int(np.argmax(outside)), values.shape) if values.ndim else ()
        where = f" at [{', '.join(map(str, at))}]" if at else ""
        raise CemOptionError(f"{label}: expected {HYPER_RANGE}, found "
                             f"{float(values[at])!r}{where}")


def setting_number(name: str, value: Any) -> float:
    """A setting given from Python (``Model(path, K=50)``) as the float ``--set`` reads."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        raise CemOptionError(f"--set {name}: expected a number, found {_found(value)}")
    return float(value)


def setting_text(name: str, value: float | int) -> str:
    """``K=3``, ``alpha=0.5``: a checked setting as ``--set`` takes it (a float's shortest
    exact form, without a trailing ``.0``)."""
    return f"{name}={repr(value).removesuffix('.0')}"


def check_setting(name: str, value: float, *, dimension: bool) -> float | int:
    """A ``--set NAME=VALUE`` (or ``Model(path, NAME=VALUE)``) value: a dimension's a whole
    number >= 1 (returned as an int), a hyperparameter's a finite number in the
    representable range (HYPER_RANGE; returned as a float)."""
    label = f"--set {name}"
    number = setting_number(name, value)
    if dimension:
        if not (math.isfinite(number) and number.is_integer() and number >= 1):
            raise CemOptionError(f"{label}: a dimension takes a whole number >= 1, found "
                                 f"{number:g}")
        return int(number)
    if not math.isfinite(number):
        raise CemOptionError(f"{label}: a hyperparameter takes a finite number, found "
                             f"{number:g}")
    check_hyper_values(label, np.array(number))
    return number


def check_workers(spec: Any) -> int:
    """``local:N`` (a Dask cluster of N worker processes on this machine): N, or a clear
    error."""
    count = spec.removeprefix("local:") if isinstance(spec, str) else ""
    if not (isinstance(spec, str) and spec.startswith("local:") and count.isascii()
            and count.isdigit() and int(count) >= 1):
        raise CemOptionError(f"expected local:N with N >= 1 worker processes, found "
                             f"{_found(spec)}")
    return int(count)
