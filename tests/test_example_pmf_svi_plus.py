"""examples/pmf_svi_plus.py runs (small sizes) and prints its table for every method."""


import pytest

from .helpers import run_example


@pytest.mark.long
def test_pmf_svi_plus_quick():
    completed = run_example("pmf_svi_plus.py", "--quick", "--no-plot", "--seeds", "2")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert "seed 1 batch VB: ELBO" in completed.stdout
    for method in ("batch VB ", "SVI+ M_t=50t (paper) ", "SVI+ M_t=max(0.95N,50t) ",
                   "SVI M=|S| (no noise) "):
        rows = [line for line in lines if line.startswith(method)]
        assert len(rows) == 1, (method, completed.stdout)
        assert "/2 " in rows[0], rows
    for method in ("batch VB ", "SVI M=|S| (no noise) "):  # these never leave the domain
        row = next(line for line in lines if line.startswith(method))
        assert "2/2 " in row and "stopped" not in row, row
        rmse_all = float(row.split()[-3])
        assert 0.3 < rmse_all < 2.0, row
    assert any(line.startswith("(training mean, constant)") for line in lines)
