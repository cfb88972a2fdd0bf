"""Averaged-iterate SVI (method 'svi-avg', cemodel.runtime.drivers.svi_avg): SVI's iterates,
reported at the Polyak–Ruppert average of those of the last half of the epochs."""

import numpy as np
import pytest

from cemodel.errors import CemDataError
from cemodel.runtime.drivers import DRIVERS, svi

X = (np.random.default_rng(0).random(60) < 0.3).astype(int)


def test_full_batches_with_unit_steps_end_at_the_exact_posterior(compiled):
    model = compiled("beta_bernoulli")
    fit = DRIVERS["svi-avg"].run(model, {"x": X}, epochs=4, batch_size=None, kappa=0.0,
                                 tau=0.0, step_scale=1.0)
    a, b = 2.0, 3.0  # the model file's prior
    assert fit["p.a"] == pytest.approx(a + X.sum(), rel=1e-12)
    assert fit["p.b"] == pytest.approx(b + len(X) - X.sum(), rel=1e-12)
    assert fit.notes["averaged_steps"] == 2  # one step per epoch, epochs 2 and 3
    assert len(fit.elbo) == 5  # SVI's four epochs, then the ELBO at the average


def test_the_answer_is_the_average_of_svis_iterates_over_the_last_half(compiled):
    model = compiled("beta_bernoulli")
    options = dict(epochs=6, batch_size=7, seed=3)
    fit = DRIVERS["svi-avg"].run(model, {"x": X}, **options)
    plain = DRIVERS["svi"].run(model, {"x": X}, **options)
    # the same iterates as plain SVI: its per-epoch trace, bit for bit
    np.testing.assert_array_equal(fit.elbo[:-1], plain.elbo)
    run = svi.begin(model, {"x": X}, **options)  # SVI by hand, recording the iterates
    iterates = []
    for epoch in range(6):
        for batch, offset in svi.minibatches(run, epoch):
            svi.step(run, batch, offset, epoch)
            if epoch >= 3:
                iterates.append([run.s.lam_p_log.copy(), run.s.lam_p_log1m.copy()])
    mean = np.mean(iterates, axis=0)
    np.testing.assert_allclose(fit.state["lam_p_log"], mean[0], rtol=1e-12)
    np.testing.assert_allclose(fit.state["lam_p_log1m"], mean[1], rtol=1e-12)
    assert fit.notes["averaged_steps"] == len(iterates) == 3 * 9
    # the average is no further from the exact posterior mean than the last iterate here
    exact = (2.0 + X.sum()) / (5.0 + len(X))
    assert abs(fit["p.a"] / (fit["p.a"] + fit["p.b"]) - exact) < 0.03


def test_what_averaging_cannot_do_is_refused(compiled):
    model = compiled("beta_bernoulli")
    with pytest.raises(CemDataError, match="not available for averaged-iterate SVI"):
        DRIVERS["svi-avg"].run(model, {"x": X}, epochs=2, tol=1e-3)
