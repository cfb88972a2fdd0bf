"""Averaged iterates: a stochastic fit reported at the Polyak–Ruppert average of its global
iterates over the last half of its epochs (``average=True``; svi-avg; SSVI-A on a small data
set by default)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import errors
from .. import driver as rt


class Average:
    """The Polyak–Ruppert average λ̄ = (1/T) Σ_t λ_t of the global iterates of the last half
    of the epochs (Polyak & Juditsky 1992; for SVI, Mandt, Hoffman & Blei 2017, §4). The
    iterates are the method's, unchanged; an average of natural parameters is a valid one
    (each domain is convex)."""

    def __init__(self, run: Any) -> None:
        self.run, self.count, self.first = run, 0, run.o.epochs // 2  # the first epoch averaged
        self.names = [name for g in run.model.GLOBALS for name in g.lam]
        self.total = {name: np.zeros_like(getattr(run.s, name)) for name in self.names}

    def add(self) -> None:
        for name in self.names:
            self.total[name] += getattr(self.run.s, name)
        self.count += 1

    def progress(self) -> dict:
        """The running sums for a checkpoint (JSON: floats round-trip exactly)."""
        return {"first": self.first, "count": self.count,
                "total": {name: value.tolist() for name, value in self.total.items()}}

    def restore(self, progress: Any, epoch: int, path: Any) -> None:
        """The checkpoint's sums; none where this fit's window begins at or after ``epoch``,
        where the checkpoint was written (a fit resumed for more epochs averages a later half)."""
        if not isinstance(progress, dict):
            raise rt.damaged_checkpoint(path, "its running average is not a mapping")
        if epoch <= self.first:
            return
        if progress.get("first") != self.first:
            raise errors.CemDataError(
                f"resume: {path} averaged its iterates from epoch {progress.get('first')}; "
                f"this fit of {self.run.o.epochs} epochs averages from epoch {self.first}, "
                f"before the checkpoint's {epoch}", hint="the epochs of the fit that wrote it")
        try:
            self.count = int(progress["count"])
            for name, value in self.total.items():
                found = np.asarray(progress["total"][name], dtype=float)
                if found.shape != value.shape:
                    raise ValueError(f"{name}: shape {found.shape}, the fit's {value.shape}")
                value[...] = found
        except (TypeError, ValueError, KeyError) as exc:
            raise rt.damaged_checkpoint(path, f"its running average cannot be restored "
                                        f"({exc})") from None

    def put(self) -> None:
        for name in self.names:
            getattr(self.run.s, name)[...] = self.total[name] / max(self.count, 1)
        if self.run.model.GLOBALS:
            self.run.model.refresh(self.run.s)
