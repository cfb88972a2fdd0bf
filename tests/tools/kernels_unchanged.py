"""Kernels unchanged: every ``@njit`` function the working tree generates is the one at REV.

What it proves (BACKEND.md §8 item 1). For each stdlib model, the golden module at git revision
REV (``tests/golden/<name>_mf.py``, what ``cemodel compile`` generated there) and the module
the working tree generates (``generate(run_stages(...))``, as ``tests/test_golden.py`` does)
are parsed with ``ast``; every function decorated with ``njit`` is taken whole, decorators
included (``ast.get_source_segment`` from its first ``@`` to its end), and compared by name,
byte for byte. It reports per model the kernels added, removed and changed (with a unified
diff) and exits 1 if a kernel present on both sides differs or one was removed; a kernel
that is new is reported only. The non-kernel half of a module (drivers, ``_prepare``, ...)
is not compared: ``traces.py`` checks that its numbers did not move.

How to run (from the repository root, with the working tree's cemodel on the path):

    PYTHONPATH=. python tests/tools/kernels_unchanged.py d63ddda
    PYTHONPATH=. python tests/tools/kernels_unchanged.py d63ddda --models lda,hmm

Not collected by pytest.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "stdlib_models"


def model_names() -> list[str]:
    """The stdlib models of the working tree, sorted."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.cem"))


def golden_at(rev: str, model: str) -> str:
    """The golden module of ``model`` at git revision ``rev``."""
    return subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:tests/golden/{model}_mf.py"],
        check=True, capture_output=True, text=True).stdout


def generated_now(model: str) -> str:
    """The module the working tree generates for ``model`` with the default settings."""
    from cemodel.compiler import generate, read_source, run_stages

    text, filename = read_source(MODELS_DIR / f"{model}.cem")
    return generate(run_stages(text, filename))


def is_njit(decorator: ast.expr) -> bool:
    """``@njit``, ``@njit(...)``, ``@numba.njit`` or ``@numba.njit(...)``."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Name):
        return target.id == "njit"
    return isinstance(target, ast.Attribute) and target.attr == "njit"


def kernels(source: str) -> dict[str, str]:
    """Every njit-decorated function of ``source`` (at any depth) by name: its whole text
    from the ``@`` of its first decorator to its last line."""
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if not any(is_njit(d) for d in node.decorator_list):
            continue
        first = node.decorator_list[0]
        span = SimpleNamespace(lineno=first.lineno, col_offset=first.col_offset - 1,
                               end_lineno=node.end_lineno, end_col_offset=node.end_col_offset)
        segment = ast.get_source_segment(source, span)  # type: ignore[arg-type]
        assert segment is not None and segment.startswith("@"), node.name
        name = node.name
        while name in found:  # two kernels of one name: both are compared
            name += "'"
        found[name] = segment
    return found


@dataclass
class Report:
    """What differs between the kernels of one model at REV and now."""

    model: str
    compared: int = 0
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, str] = field(default_factory=dict)  # name -> unified diff

    @property
    def ok(self) -> bool:
        return not self.removed and not self.changed


def compare_model(model: str, before: str, after: str, rev: str) -> Report:
    """The kernels of ``before`` (the golden at ``rev``) against those of ``after``."""
    old, new = kernels(before), kernels(after)
    report = Report(model, compared=len(set(old) & set(new)))
    report.added = sorted(set(new) - set(old))
    report.removed = sorted(set(old) - set(new))
    for name in sorted(set(old) & set(new)):
        if old[name] != new[name]:
            diff = difflib.unified_diff(
                old[name].splitlines(keepends=True), new[name].splitlines(keepends=True),
                fromfile=f"{rev}:tests/golden/{model}_mf.py:{name}",
                tofile=f"working tree:{model}:{name}")
            report.changed[name] = "".join(diff)
    return report


def print_report(report: Report) -> None:
    """One line per model; the names added or removed and the diff of every changed one."""
    status = "unchanged" if report.ok else "CHANGED"
    print(f"{report.model}: {status}: {report.compared} kernels in both, "
          f"{len(report.changed)} changed, {len(report.removed)} removed, "
          f"{len(report.added)} added")
    for name in report.removed:
        print(f"  removed: {name}")
    for name in report.added:
        print(f"  added: {name}")
    for name, diff in report.changed.items():
        print(f"  changed: {name}")
        print("".join(f"    {line}" for line in diff.splitlines(keepends=True)), end="")


def run(rev: str, models: Sequence[str]) -> int:
    """Compare every model's kernels; 0 if none present at ``rev`` changed or went away."""
    reports = [compare_model(m, golden_at(rev, m), generated_now(m), rev) for m in models]
    for report in reports:
        print_report(report)
    bad = [r.model for r in reports if not r.ok]
    total = sum(r.compared for r in reports)
    if bad:
        print(f"KERNELS CHANGED in {len(bad)} of {len(reports)} models: {', '.join(bad)}")
        return 1
    print(f"ALL KERNELS UNCHANGED: {total} kernels in {len(reports)} models identical to {rev}")
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the git revision whose golden modules are the reference")
    parser.add_argument("--models", help="comma-separated model names (default: all stdlib)")
    args = parser.parse_args(None if argv is None else list(argv))
    models = model_names() if not args.models else [m.strip() for m in args.models.split(",")]
    unknown = sorted(set(models) - set(model_names()))
    if unknown:
        parser.error(f"unknown models: {', '.join(unknown)}")
    return run(args.rev, models)


if __name__ == "__main__":
    sys.exit(main())
