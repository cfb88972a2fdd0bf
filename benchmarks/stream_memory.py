"""Peak memory of LDA SVI read out of core, as the corpus grows from 10x the minibatch up.

For each corpus size (a multiple of the minibatch size) the script writes a synthetic LDA
corpus as a UCI ``docword`` file, converts it once (``cemodel.streaming.open_source``, in a
process of its own), and then fits ``stdlib_models/lda.cem`` by SVI in a fresh child process,
twice: reading the minibatches from disk (``Model.stream``) and with the whole corpus loaded in
memory (``cemodel.data.load_data``). Each child first compiles and runs a tiny warm-up fit, then
resets its peak resident set (``/proc/self/clear_refs``) so that the peak it reports
(``VmHWM``) is that of the fit alone, data loading included; numba compilation is not in it.

    python benchmarks/stream_memory.py                       # x10, x40, x160 the batch, K = 50
    python benchmarks/stream_memory.py --multiples 10 20 --docs-per-batch 64 --k 10  # smoke
    python benchmarks/stream_memory.py --markdown            # a table for RESULTS.md

Expected: the out-of-core peak stays flat (it holds one minibatch, the topics and, per epoch,
one permutation of the document indices: 8 bytes per document), while the in-memory peak grows
with the corpus.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LDA = REPO / "stdlib_models" / "lda.cem"


def write_corpus(path: Path, n_docs: int, n_words: int, k: int, length: int, seed: int) -> int:
    """A corpus drawn from LDA (alpha 0.1, eta 0.01), written block by block; returns NNZ."""
    rng = np.random.default_rng(seed)
    topics = rng.dirichlet(np.full(n_words, 0.01), k)
    body = path.with_suffix(".body")
    nnz = 0
    with open(body, "w") as f:
        for first in range(0, n_docs, 1000):
            docs = np.arange(first, min(first + 1000, n_docs))
            theta = rng.dirichlet(np.full(k, 0.1), docs.size)
            lines = []
            for d, mix in zip(docs, theta, strict=True):
                counts = rng.multinomial(length, mix @ topics)
                words = np.flatnonzero(counts)
                nnz += words.size
                lines.append(np.column_stack([np.full(words.size, d + 1), words + 1,
                                              counts[words]]))
            np.savetxt(f, np.concatenate(lines), fmt="%d")
    with open(path, "w") as out, open(body) as f:
        out.write(f"{n_docs}\n{n_words}\n{nnz}\n")
        while chunk := f.read(1 << 24):
            out.write(chunk)
    body.unlink()
    return nnz


CHILD = r"""
import json, os, sys, time
import numpy as np
from cemodel.api import Model
from cemodel.data import load_data

mode, path, k, batch, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
    int(sys.argv[5])

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024.0

model = Model("lda")
warm = {"w": np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 3.0]])}
model.fit(warm, "svi", dims={"K": 2}, epochs=1, batch_size=2)  # compile, outside the peak
open("/proc/self/clear_refs", "w").write("5")  # reset VmHWM
before = status("VmRSS")
clock = time.perf_counter()
if mode == "stream":
    data = model.stream(path)
else:
    data = load_data(path, model.module.SPEC)
fit = model.fit(data, "svi", dims={"K": k}, epochs=epochs, batch_size=batch, seed=0)
seconds = time.perf_counter() - clock
print(json.dumps({"peak": status("VmHWM"), "before": before, "seconds": seconds,
                  "elbo": float(fit.elbo[-1])}))
"""


def child(mode: str, path: Path, k: int, batch: int, epochs: int, env: dict) -> dict:
    run = subprocess.run([sys.executable, "-c", CHILD, mode, str(path), str(k), str(batch),
                          str(epochs)], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise RuntimeError(f"{mode} child failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--multiples", type=int, nargs="+", default=[10, 40, 160],
                        help="corpus sizes in minibatches")
    parser.add_argument("--docs-per-batch", type=int, default=256, help="minibatch size |S|")
    parser.add_argument("--k", type=int, default=50, help="topics")
    parser.add_argument("--vocab", type=int, default=5000, help="vocabulary size")
    parser.add_argument("--length", type=int, default=150, help="tokens per document")
    parser.add_argument("--epochs", type=int, default=1, help="passes (each with its ELBO)")
    parser.add_argument("--workdir", default=None, help="where the corpora go (default: tmp)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)

    work = Path(args.workdir or tempfile.mkdtemp(prefix="cemodel_stream_"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CEMODEL_CACHE": os.environ.get(
        "CEMODEL_CACHE", str(REPO / ".cemodel_cache" / "bench"))}
    rows = []
    for multiple in args.multiples:
        n_docs = multiple * args.docs_per_batch
        path = work / f"docword.synthetic{n_docs}.txt"
        if not path.exists():
            print(f"writing {n_docs} documents ...", file=sys.stderr, flush=True)
            write_corpus(path, n_docs, args.vocab, args.k, args.length, seed=multiple)
        clock = time.perf_counter()  # the one-time conversion, in a process of its own
        subprocess.run([sys.executable, "-c", "import sys; from cemodel.api import Model; "
                        "Model('lda').stream(sys.argv[1])", str(path)], check=True, env=env)
        convert = time.perf_counter() - clock
        results = {}
        for mode in ("stream", "memory"):
            print(f"{mode}: {n_docs} documents ...", file=sys.stderr, flush=True)
            results[mode] = child(mode, path, args.k, args.docs_per_batch, args.epochs, env)
        rows.append((multiple, n_docs, path.stat().st_size / 2**20, convert, results))

    head = ("| corpus (x batch) | documents | file MB | stream: peak MB | stream: fit MB | "
            "stream: docs/s | in memory: peak MB | in memory: fit MB | in memory: docs/s |")
    print(head if args.markdown else head.replace("|", " ").strip())
    if args.markdown:
        print("|" + "---:|" * 9)
    for multiple, n_docs, size, _, res in rows:
        cells = [f"x{multiple}", f"{n_docs:,}", f"{size:.1f}"]
        for mode in ("stream", "memory"):
            r = res[mode]
            rate = n_docs * args.epochs / r["seconds"]
            cells += [f"{r['peak']:.1f}", f"{r['peak'] - r['before']:.1f}", f"{rate:,.0f}"]
        print("| " + " | ".join(cells) + " |" if args.markdown else "  ".join(cells))
    first, last = rows[0][4], rows[-1][4]
    grow = {m: last[m]["peak"] - first[m]["peak"] for m in ("stream", "memory")}
    factor = rows[-1][0] / rows[0][0]
    print(f"\nFrom x{rows[0][0]} to x{rows[-1][0]} the batch ({factor:g}x the documents) the "
          f"out-of-core peak moved by {grow['stream']:+.1f} MB, the in-memory peak by "
          f"{grow['memory']:+.1f} MB. Conversion (once per file): "
          + ", ".join(f"x{m}: {c:.1f} s" for m, _, _, c, _ in rows) + ".")
    print(f"K = {args.k}, V = {args.vocab}, {args.length} tokens per document, |S| = "
          f"{args.docs_per_batch}, {args.epochs} epoch(s) with the full-data ELBO after each.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
