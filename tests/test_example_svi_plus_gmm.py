"""examples/svi_plus_gmm.py runs (small sizes) and prints its table for the three methods."""


import pytest

from .helpers import run_example


@pytest.mark.long
def test_svi_plus_gmm_quick():
    completed = run_example("svi_plus_gmm.py", "--quick", "--no-plot", "--seeds", "2")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert "seed 1: MF" in completed.stdout
    for method in ("MF ", "SVI |S|=40 ", "SVI+ |S|=40 M=16 "):
        rows = [line for line in lines if line.startswith(method)]
        assert len(rows) == 2, (method, completed.stdout)  # final and polished tables
        assert all("/2 " in row for row in rows), rows
