"""GaP-NMF on a synthetic spectrogram: mean field vs SSVI-A (Hoffman & Blei 2015, §4.3, Fig. 5).

    python examples/gap_nmf.py [--iters 100] [--max-local-iter 50] [--cavi-iters 1000]
                               [--ssvi-steps 300] [--ssvi-kappa 0.3] [--ssvi-local-iter 10]
                               [--K 100] [--seed 0] [--quick] [--no-plot]

The experiment of the paper: a 257 × 50 dictionary W whose columns resemble magnitude spectra
of speech sounds (voiced: a harmonic comb under a formant envelope; unvoiced: a broad noise
envelope), a 50 × 1000 activation matrix H of independent Gamma(0.2, 0.2) draws, and a
spectrogram Y_ft ~ Poisson(Σ_k W_fk H_kt). All fits use stdlib_models/gap_nmf.cem (the
GaP-KL-NMF model of eq. 12, where cemodel introduces the split counts itself) with a = 0.25,
b = 0.2, α = 1, c = 1 and truncation K; SSVI-A uses the whole spectrogram as its minibatch.

Printed: for each method, the correlation of each true dictionary column with its closest
match among the columns of E_q[W] (over the 257 frequencies), sorted in decreasing order, and
how many exceed 0.9; the plot of the sorted correlations (the paper's Figure 5) is saved to
examples/out/gap_nmf.png. The paper: SSVI-A recovers good approximations of nearly all 50
bases, mean field far fewer (it explains the data with too few components).

Three fits, all from the same concentrated start near the prior mean (Hoffman et al. 2010):
mean field with each local step run to convergence (cemodel's default: up to
--max-local-iter sweeps per item and iteration, H kept between iterations), the classic
coordinate ascent that updates every variable once per iteration (max_local_iter=1,
--cavi-iters iterations), and SSVI-A (the whole spectrogram per step, --ssvi-local-iter
sweeps with H warm-started between steps, ρ_t = (t + 1)^−kappa).

Results (`python examples/gap_nmf.py`: K = 100; mean field 100 iterations of up to 50 sweeps,
138 s; one-sweep mean field 1000 iterations, 101 s; SSVI-A 300 steps of 10 sweeps, κ = 0.3,
168 s with the per-step ELBO; 2-core machine), true columns matched with correlation > 0.9
(> 0.8):

    | fit                                          | > 0.9 | > 0.8 | ELBO      |
    |----------------------------------------------|------:|------:|----------:|
    | mean field, locals to convergence (100 it.)  |    40 |    45 | −1.550e6  |
    | mean field, one sweep per iteration (1000)   |     4 |    11 | −1.943e6  |
    | SSVI-A (300 steps)                           |    31 |    43 | −1.601e6  |

The paper's shape appears against the classic mean field: SSVI-A recovers most bases (31,
and 43 above 0.8) where the one-sweep mean field recovers 4 (11): "MF performs quite
poorly". It does not appear against cemodel's default mean field, whose inner loop over the
locals (the local step to convergence, as SSVI-A's) reaches 40 of 50 with a better ELBO.

The SSVI-A schedule matters, and the paper does not give its own. These runs used the same
data:
- With the per-step ELBO off (`evaluate=False`), κ = 0.3 reached 36 of 50 columns at 50
  steps and 40 from step 200 on (46–47 above 0.8), in 86 s. The ELBO pass re-solves the kept
  H given E_q[β], and the warm start continues from that, so the two trajectories differ.
- κ = 0.5 reached 37 of 50 (44).
- κ = 0.7 reached 22 of 50 (32) after 500 steps.
- κ = 0.7 with 50 cold sweeps per step reached 13 of 50 (29) after 100 steps and 22 (37)
  after 300.
- Computing λ̂ from the same draw of θ, W as the local step, now the default and unbiased,
  left κ = 0.7 unchanged.
- The first start (prior shapes, jittered rates) made SSVI-A collapse to 8 components.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from cemodel.compiler import compile_model

MODEL = Path(__file__).resolve().parents[1] / "stdlib_models" / "gap_nmf.cem"
OUT = Path(__file__).resolve().parent / "out"


def speech_like_dictionary(rng: np.random.Generator, n_bins: int, n_atoms: int) -> np.ndarray:
    """Magnitude spectra (n_bins × n_atoms) at 16 kHz with a 512-point FFT (31.25 Hz bins):
    three in four voiced (harmonics of a 90–280 Hz pitch under 2–4 formant bumps and a
    spectral tilt), the rest unvoiced (a smooth broad envelope, high frequencies)."""
    freqs = np.arange(n_bins) * 8000.0 / (n_bins - 1)
    W = np.empty((n_bins, n_atoms))
    for k in range(n_atoms):
        envelope = np.zeros(n_bins)
        if rng.random() < 0.75:
            for _ in range(rng.integers(2, 5)):
                centre, width = rng.uniform(250, 4000), rng.uniform(80, 300)
                envelope += rng.uniform(0.3, 1.0) * np.exp(-0.5 * ((freqs - centre) / width) ** 2)
            envelope *= np.exp(-freqs / rng.uniform(1500, 4000))  # spectral tilt
            pitch = rng.uniform(90, 280)
            distance = np.abs(((freqs / pitch + 0.5) % 1.0) - 0.5) * pitch  # to a harmonic
            comb = np.exp(-0.5 * (distance / 25.0) ** 2)
            W[:, k] = envelope * comb + 0.01 * envelope.max()
        else:
            centre, width = rng.uniform(2500, 7000), rng.uniform(600, 2000)
            W[:, k] = np.exp(-0.5 * ((freqs - centre) / width) ** 2) + 0.02
        W[:, k] /= W[:, k].mean()
    return W


def sorted_correlations(true: np.ndarray, learned: np.ndarray) -> np.ndarray:
    """For each true column, its Pearson correlation with the closest learned column."""
    a = true - true.mean(axis=0)
    b = learned - learned.mean(axis=0)
    c = (a.T @ b) / np.outer(np.linalg.norm(a, axis=0), np.linalg.norm(b, axis=0) + 1e-300)
    return np.sort(c.max(axis=1))[::-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=100, help="mean-field iterations")
    parser.add_argument("--ssvi-steps", type=int, default=300, help="SSVI-A steps")
    parser.add_argument("--ssvi-kappa", type=float, default=0.3,
                        help="SSVI-A step size ρ_t = (t + 1)^−kappa")
    parser.add_argument("--ssvi-local-iter", type=int, default=10,
                        help="SSVI-A local sweeps per step (H warm-started between steps)")
    parser.add_argument("--K", type=int, default=100, help="the truncation of the fit")
    parser.add_argument("--max-local-iter", type=int, default=50,
                        help="mean field's local sweeps per item and iteration")
    parser.add_argument("--cavi-iters", type=int, default=1000,
                        help="iterations of the classic mean field (each variable updated once "
                             "per iteration: one local sweep); 0 skips it")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=2.0,
                        help="mean magnitude of a dictionary entry (sets the counts' size)")
    parser.add_argument("--quick", action="store_true", help="small sizes (used by the tests)")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    n_bins, n_atoms, n_frames, K, iters = 257, 50, 1000, args.K, args.iters
    cavi_iters, steps = args.cavi_iters, args.ssvi_steps
    if args.quick:
        n_bins, n_atoms, n_frames, K, iters, cavi_iters, steps = 40, 6, 120, 12, 15, 30, 15
    rng = np.random.default_rng(args.seed)
    W = args.scale * speech_like_dictionary(rng, n_bins, n_atoms)
    H = rng.gamma(0.2, 1 / 0.2, (n_atoms, n_frames))
    Y = rng.poisson(W @ H).astype(np.float64)
    print(f"spectrogram {n_bins} × {n_frames}, {n_atoms} true components, mean count "
          f"{Y.mean():.2f}; fitting K = {K}", flush=True)
    model = compile_model(MODEL, {"K": K})
    data = {"Y": Y.T}  # frames are the items
    rows = {}
    clock = time.perf_counter()
    mf = model.fit(data, max_iter=iters, tol=1e-10, seed=args.seed,
                   max_local_iter=args.max_local_iter)
    rows["MF"] = (mf, time.perf_counter() - clock)
    if cavi_iters:  # coordinate ascent with one sweep over the locals per iteration
        clock = time.perf_counter()
        cavi = model.fit(data, max_iter=cavi_iters, tol=1e-10, seed=args.seed, max_local_iter=1)
        rows["MF, 1 sweep"] = (cavi, time.perf_counter() - clock)
    clock = time.perf_counter()
    ssvi = model.fit_ssvi_a(data, batch_size=n_frames, epochs=steps, kappa=args.ssvi_kappa,
                            tau=1.0, seed=args.seed, max_local_iter=args.ssvi_local_iter,
                            warm_start=True)
    rows["SSVI-A"] = (ssvi, time.perf_counter() - clock)
    curves = {}
    for name, (result, seconds) in rows.items():
        weights = result["theta.shape"] / result["theta.rate"]
        columns = result["W.shape"] / result["W.rate"]
        corr = sorted_correlations(W, columns)
        curves[name] = corr
        used = int(np.sum(weights > 1e-3 * weights.max()))
        print(f"{name:11s} {seconds:7.1f} s, ELBO {result.elbo[-1]:.6g}, components with "
              f"weight > 1e-3 of the largest: {used}; true columns matched with correlation "
              f"> 0.9: {int(np.sum(corr > 0.9))} of {n_atoms}, > 0.8: {int(np.sum(corr > 0.8))}",
              flush=True)
        shown = np.array2string(corr, precision=2, max_line_width=90)
        print(f"        sorted correlations: {shown}")
    if not args.no_plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        OUT.mkdir(exist_ok=True)
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        ax.plot(curves["MF"], "-", label=f"mean field, locals to convergence ({iters} it.)")
        if "MF, 1 sweep" in curves:
            ax.plot(curves["MF, 1 sweep"], ":", label=f"mean field, one sweep ({cavi_iters} it.)")
        ax.plot(curves["SSVI-A"], "--", label=f"SSVI-A ({steps} steps)")
        ax.set_xlabel("true dictionary column (sorted)")
        ax.set_ylabel("correlation with the closest learned column")
        ax.set_ylim(-0.05, 1.02)
        ax.legend()
        ax.set_title("GaP-NMF on a synthetic spectrogram (cf. Hoffman & Blei 2015, Fig. 5)",
                     fontsize=9)
        fig.tight_layout()
        path = OUT / "gap_nmf.png"
        fig.savefig(path, dpi=120)
        print(f"saved {path}")


if __name__ == "__main__":
    main()
