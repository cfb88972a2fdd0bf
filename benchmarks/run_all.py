"""Run every benchmark and write benchmarks/RESULTS.md: one command for the whole suite.

    python benchmarks/run_all.py                   # everything, full size (about 2 hours)
    python benchmarks/run_all.py --quick -o /tmp/RESULTS.md   # smoke sizes, a few minutes
    python benchmarks/run_all.py --only gmm_mf stream_memory   # some sections; the others
                                                               # keep their last results

Each section runs one script in its own process with ``--markdown`` and its arguments,
captures its table and notes (stdout), and is written under a heading with the exact command
that produced it, its wall time, and the commit and machine it ran on. A section that fails
is written with its error instead of a table; the others still run. With ``--only``, sections
not run are copied from the existing results file, so the file always has every section.
Analysis that is not produced by a script (profiles by hand, history, the KLC-CG LDA example)
lives in ``benchmarks/NOTES.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "RESULTS.md"


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]


SECTIONS = (
    Section("lda_mf_nyt", "LDA, batch mean field, New York Times: cemodel vs scikit-learn "
            "batch, tomotopy and BigARTM", "lda_mf.py", ("--corpus", "nyt", "--k", "20", "100"),
            ("--corpus", "reuters", "--k", "10", "--iters", "3", "--tomotopy-iters", "20")),
    Section("lda_mf_gcide", "LDA, batch mean field, GCIDE: cemodel vs scikit-learn batch, "
            "tomotopy and BigARTM", "lda_mf.py",
            ("--corpus", "gcide", "--k", "20", "100", "--iters", "10", "--tomotopy-iters", "200"),
            ("--corpus", "gcide", "--max-docs", "2000", "--k", "10", "--iters", "2",
             "--tomotopy-iters", "10")),
    Section("lda_svi_nyt", "LDA, SVI, New York Times: cemodel vs scikit-learn online, gensim "
            "and Vowpal Wabbit", "lda_svi.py",
            ("--corpus", "nyt", "--k", "20", "100", "--epochs", "5"),
            ("--corpus", "reuters", "--k", "10", "--epochs", "2", "--batch-size", "64")),
    Section("lda_svi_gcide", "LDA, SVI, GCIDE: cemodel vs scikit-learn online, gensim and "
            "Vowpal Wabbit",
            "lda_svi.py", ("--corpus", "gcide", "--k", "20", "100", "--epochs", "2"),
            ("--corpus", "gcide", "--max-docs", "2000", "--k", "10", "--epochs", "1",
             "--batch-size", "64")),
    Section("gmm_mf", "Gaussian mixture, batch mean field: cemodel vs scikit-learn "
            "BayesianGaussianMixture and bayespy", "gmm_mf.py", (), ("--quick",)),
    Section("scaling", "Scaling: threads (1, 2) and data size (x1, x2, x4)", "scaling.py", (),
            ("--quick",)),
    Section("scaling_busy", "Threads on a busy machine: the default vs one thread beside a "
            "busy-loop process", "scaling.py", ("--only", "busy", "--busy-repeats", "5"),
            ("--only", "busy", "--busy-n", "200", "2000", "--busy-repeats", "1")),
    Section("estep_rate", "LDA E-step: GFLOP/s against the dgemm peak, sweeps counted",
            "estep_rate.py", (), ("--corpus", "reuters", "--k", "10", "--iters", "2")),
    Section("stream_memory", "Out of core: peak memory of LDA SVI as the corpus grows",
            "stream_memory.py", (),
            ("--multiples", "10", "20", "--docs-per-batch", "64", "--k", "10", "--vocab",
             "500", "--length", "50")),
    Section("klc_mog", "Mixture of Gaussians, KLC-CG: cemodel vs bayespy collapsed Riemannian "
            "CG", "klc_mog.py", ("--cg", "fr", "pr", "hs"),
            ("--r", "1", "3", "--starts", "2", "--max-iter", "200")),
    Section("compile_once", "Compile once: the second fit compiles nothing", "compile_once.py",
            (), ("--runs", "2")),
    Section("hmm", "Hidden Markov models, batch mean field: cemodel vs hmmlearn's variational "
            "HMMs", "hmm.py", (), ("--quick",)),
)
_MARK = "<!-- section: {} -->"


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for package in ("numpy", "numba", "scipy", "scikit-learn", "gensim", "tomotopy", "bayespy",
                    "hmmlearn"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    return (f"{os.cpu_count()} cores ({cpu}), python {platform.python_version()}, "
            + ", ".join(versions) + f"; cemodel at commit {commit}"
            + (" with uncommitted changes" if dirty else ""))


def _existing(path: Path) -> dict[str, str]:
    """The sections of an earlier results file, by name."""
    if not path.exists():
        return {}
    text = path.read_text()
    found = {}
    marks = list(re.finditer(r"<!-- section: (\w+) -->", text))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        found[mark.group(1)] = text[mark.start():end].rstrip() + "\n"
    return found


def run_section(section: Section, quick: bool) -> str:
    machine = _machine()  # the commit and machine at this section's start
    args = [*(section.quick if quick else section.full), "--markdown"]
    command = f"python benchmarks/{section.script} {' '.join(args)}"
    print(f"== {section.name}: {command}", file=sys.stderr, flush=True)
    clock = time.perf_counter()
    # progress (the script's stderr) is shown as it comes and its end kept for a failure
    with tempfile.TemporaryFile("w+") as table, subprocess.Popen(
            [sys.executable, str(REPO / "benchmarks" / section.script), *args], cwd=REPO,
            stdout=table, stderr=subprocess.PIPE, text=True) as child:
        tail: deque[str] = deque(maxlen=25)
        for line in child.stderr:
            sys.stderr.write("   " + line)
            tail.append(line.rstrip())
        returncode = child.wait()
        table.seek(0)
        stdout = table.read()
    minutes = (time.perf_counter() - clock) / 60
    stamp = time.strftime("%Y-%m-%d")
    lines = [_MARK.format(section.name), f"## {section.title} (`benchmarks/{section.script}`)",
             "", "Command (from the repository root):", "", "```", command, "```", "",
             f"Run {stamp}, {minutes:.1f} min; {machine}.", ""]
    if returncode == 0:
        lines.append(stdout.strip())
    else:
        lines += [f"**Failed** (exit {returncode}); the end of its error output:", "",
                  "```", *tail, "```"]
    print(f"   {'ok' if returncode == 0 else 'FAILED'} in {minutes:.1f} min",
          file=sys.stderr, flush=True)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes (minutes, not hours)")
    parser.add_argument("--only", nargs="+", choices=[s.name for s in SECTIONS],
                        help="run these sections; keep the others from the results file")
    parser.add_argument("-o", "--output", default=str(RESULTS), help="the results file")
    args = parser.parse_args(argv)
    out = Path(args.output)
    kept = _existing(out)
    chosen = set(args.only or [s.name for s in SECTIONS])
    parts = ["# Benchmark results", "",
             "Written by `python benchmarks/run_all.py` (each section says the command that "
             "produced it and when). Absolute seconds drift between machines and with load: "
             "compare the ratios, which are measured side by side in one run. Targets are "
             "from the project's TARGETS; a missed target says by how much. Hand analysis and "
             "history: `benchmarks/NOTES.md`.", ""]
    done: dict[str, str] = {}

    def document() -> str:
        # the file's sections in its order, hand-written ones (no script here) kept as they are,
        # then the scripts' sections it does not have yet
        texts = [done.get(name) or kept[name] for name in kept]
        for section in SECTIONS:
            if section.name not in kept:
                placeholder = (f"{_MARK.format(section.name)}\n## {section.title}\n\nNot run "
                               f"yet: `python benchmarks/run_all.py --only {section.name}`.\n")
                texts.append(done.get(section.name) or placeholder)
        return "\n".join(parts + texts)

    for section in SECTIONS:
        if section.name in chosen:
            done[section.name] = run_section(section, args.quick)
            tmp = out.with_name(f".{out.name}.tmp")  # after every section, never half a file
            tmp.write_text(document())
            os.replace(tmp, out)
    failed = sum("**Failed**" in text for text in done.values())
    print(f"wrote {out}" + (f"; {failed} section(s) failed" if failed else ""), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
