"""The adaptive learning rate of Ranganath, Wang, Blei & Xing (2013), one per global.

With g_t = λ̂_t − λ_t the noisy natural gradient of a global (all its natural-parameter
arrays as one vector), moving averages over a window τ_t

    ḡ ← (1 − 1/τ_t) ḡ + g_t / τ_t,   h̄ ← (1 − 1/τ_t) h̄ + g_tᵀg_t / τ_t,
    ρ_t = ḡᵀḡ / h̄,                  τ_{t+1} = τ_t (1 − ρ_t) + 1,

give the step λ ← (1 − ρ_t)λ + ρ_t λ̂_t that minimises the expected distance to the batch
update: ρ_t is near 1 where the gradient's mean dominates its noise (far from the optimum, or
a minibatch that is the whole data set: then each step is batch MF's) and falls as the noise
dominates, with no schedule to tune. ḡ, h̄ and τ start from ``samples`` gradients at the
starting λ (τ_1 = their number), as the paper's initialisation does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class AdaptiveRate:
    """ρ_t for one global from its natural gradients (the module docstring)."""

    def __init__(self, samples: Sequence[Sequence[np.ndarray]]) -> None:
        if not samples:
            raise ValueError("the adaptive learning rate starts from at least one gradient")
        flat = [self._flat(g) for g in samples]
        self.gbar = np.mean(flat, axis=0)
        self.hbar = float(np.mean([v @ v for v in flat]))
        self.window = float(len(flat))

    @staticmethod
    def _flat(gradient: Sequence[np.ndarray]) -> np.ndarray:
        return np.concatenate([np.ravel(a) for a in gradient])

    def rho(self, gradient: Sequence[np.ndarray]) -> float:
        """ρ_t for the gradient g_t = λ̂_t − λ_t (its arrays), the averages updated."""
        g = self._flat(gradient)
        keep = 1.0 - 1.0 / self.window
        self.gbar = keep * self.gbar + g / self.window
        self.hbar = keep * self.hbar + float(g @ g) / self.window
        rho = float(self.gbar @ self.gbar) / self.hbar if self.hbar > 0.0 else 1.0
        rho = min(max(rho, 0.0), 1.0)
        self.window = self.window * (1.0 - rho) + 1.0
        return rho

    def state(self) -> dict:
        """What a checkpoint keeps (JSON, but ḡ: an array)."""
        return {"hbar": self.hbar, "window": self.window}
