"""Fit BigARTM offline on a UCI bag-of-words corpus; run by ``_bigartm.py`` with the python of
an environment that has ``artm`` (bigartm 0.9.2 pins ``protobuf==3.20.3``, so it usually lives
in its own venv). Needs only numpy and artm, not cemodel.

    python bigartm_driver.py DIR --k 20 --passes 30 --doc-passes 10 --tau-phi -0.99 \\
        --tau-theta -0.9 --seed 0 [--eval-every 5]

``DIR`` holds ``docword.train.txt`` and ``vocab.train.txt`` (tokens are the column indices of
the benchmark's count matrix: ``"0"``, ``"1"``, ...). The model is PLSA with the
SmoothSparsePhi and SmoothSparseTheta regularisers (M-step phi_wt ∝ (n_wt + tau_phi)_+,
E-step theta_td ∝ (n_td + tau_theta)_+; Vorontsov & Potapenko 2015, ARTM), one processor.
Only the ``fit_offline`` calls are timed: one of ``--passes`` collection passes when no
``--eval-every`` is given, else one pass per call, with Phi copied out (not timed) every that
many passes. Writes ``DIR/result.npz``: ``phi`` (snapshots x K x V, rows in the order of the
matrix's columns, words ARTM does not have are 0), ``passes`` and ``seconds`` (the fit's
seconds at each snapshot), ``nwt`` (the last pass's expected counts, K x V), the version and
the memory figures of ``_common.FitMemory``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # one thread, before numpy loads (not when a test imports this)
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402  (stdlib only at import)
import numpy as np  # noqa: E402


def phi_in_column_order(frame, n_words: int) -> np.ndarray:
    """ARTM's Phi (a data frame, one row per token, one column per topic) as K x V with column
    j = the token ``str(j)``; tokens ARTM dropped are 0. float32, ARTM's own precision."""
    out = np.zeros((frame.shape[1], n_words), dtype=np.float32)
    columns = np.array([int(token) for token in frame.index])
    out[:, columns] = frame.to_numpy(dtype=np.float32).T
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--k", type=int, required=True)
    parser.add_argument("--passes", type=int, required=True)
    parser.add_argument("--doc-passes", type=int, default=10)
    parser.add_argument("--tau-phi", type=float, required=True)
    parser.add_argument("--tau-theta", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=0)
    args = parser.parse_args(argv)

    import artm

    n_words = sum(1 for _ in open(args.dir / "vocab.train.txt", encoding="ascii"))
    start = time.perf_counter()
    vectorizer = artm.BatchVectorizer(data_path=str(args.dir), data_format="bow_uci",
                                      collection_name="train",
                                      target_folder=str(args.dir / "batches"))
    model = artm.ARTM(num_topics=args.k, num_processors=1, seed=args.seed,
                      num_document_passes=args.doc_passes, dictionary=vectorizer.dictionary,
                      cache_theta=False)
    model.regularizers.add(artm.SmoothSparsePhiRegularizer(name="phi", tau=args.tau_phi))
    model.regularizers.add(artm.SmoothSparseThetaRegularizer(name="theta", tau=args.tau_theta))
    _common.log(f"    bigartm: batches and model ready in {time.perf_counter() - start:.1f} s "
                "(not timed)")
    memory = _common.FitMemory()
    snapshots, passes, seconds = [], [], []
    elapsed = 0.0
    memory.start()
    if not args.eval_every:
        start = time.perf_counter()
        model.fit_offline(batch_vectorizer=vectorizer, num_collection_passes=args.passes)
        elapsed = time.perf_counter() - start
    else:
        for done in range(1, args.passes + 1):
            start = time.perf_counter()
            model.fit_offline(batch_vectorizer=vectorizer, num_collection_passes=1)
            elapsed += time.perf_counter() - start
            if done % args.eval_every == 0 and done < args.passes:
                snapshots.append(phi_in_column_order(model.get_phi(), n_words))
                passes.append(done)
                seconds.append(elapsed)
    memory.stop()
    snapshots.append(phi_in_column_order(model.get_phi(), n_words))
    passes.append(args.passes)
    seconds.append(elapsed)
    nwt = phi_in_column_order(model.get_phi(model_name=model.model_nwt), n_words)
    np.savez(args.dir / "result.npz", phi=np.array(snapshots), passes=np.array(passes),
             seconds=np.array(seconds), nwt=nwt, version=artm.version(),
             peak_mb=memory.peak_mb, fit_mb=memory.fit_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
