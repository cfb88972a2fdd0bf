"""examples/lda_svi.py runs (Reuters, small sizes) and prints its table of 12 combinations."""

import math

import pytest

from .helpers import run_example


@pytest.mark.long
def test_lda_svi_quick():
    completed = run_example("lda_svi.py", "--quick", "--no-plot")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("final held-out"))
    table = lines[header + 2:header + 14]
    combos = set()
    for row in table:
        method, local, held_out, seconds = row.split()[:4]
        combos.add((method, local))
        assert -20.0 < float(held_out) < 0.0 and math.isfinite(float(seconds)), row
    assert combos == {(method, local) for method in ("SVI", "SVI+", "SSVI-A", "SSVI")
                      for local in ("mf", "gibbs", "cvb0")}, completed.stdout
