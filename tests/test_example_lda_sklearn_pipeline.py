"""examples/lda_sklearn_pipeline.py runs (Reuters, --quick): CV table, best K, top words."""

import math
import re

import pytest

from .helpers import run_example


def test_lda_sklearn_pipeline_quick():
    pytest.importorskip("sklearn")
    pytest.importorskip("lda")
    completed = run_example("lda_sklearn_pipeline.py", "--quick")
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    rows = re.findall(r"^\s+(\d+)\s+(-\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)$", out,
                      flags=re.MULTILINE)
    assert [int(K) for K, *_ in rows] == [5, 10, 20], out
    for _, score, _, perplexity, _ in rows:
        assert -math.log(4258) < float(score) < 0  # better than uniform over the words
        assert math.isclose(float(perplexity), math.exp(-float(score)), rel_tol=1e-3)
    best = int(re.search(r"^best K = (\d+)$", out, flags=re.MULTILINE).group(1))
    assert best == int(max(rows, key=lambda row: float(row[1]))[0])
    assert len(re.findall(r"^topic +\d+: (?:\S+ ){7}\S+$", out, flags=re.MULTILINE)) == best
    held_out = float(re.search(r"held-out perplexity at K = \d+: (\d+\.\d+)", out).group(1))
    assert 1.0 < held_out < 4258
