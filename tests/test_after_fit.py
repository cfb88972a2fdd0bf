"""After the fit (issue 21 items 1, 2, 5): every stdlib model's fit as ArviZ's InferenceData
(az.summary runs, axes named after the plates), the .nc of `cemodel fit` against its .npz,
`cemodel summarize`'s intervals, saved fits loaded back (and refused when they are of another
model or format), a fitted CemEstimator through joblib."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import cemodel
from cemodel.cli import main
from cemodel.errors import CemError
from cemodel.latents import DISCRETE_LIMIT, kept, owner
from cemodel.saved import source_hash

from .tools.traces import make_data

REPO = Path(__file__).resolve().parents[1]
MODELS = sorted(p.stem for p in (REPO / "stdlib_models").glob("*.cem"))
az = pytest.importorskip("arviz")
xr = pytest.importorskip("xarray")


def _fit(name: str, **options):
    model = cemodel.Model(name)
    dataset = make_data(model.module.SPEC, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short fit may not converge
        fit = model.fit(dataset.data, max_iter=5, dims=dataset.dims or None, **options)
    return model, dataset, fit


@pytest.mark.parametrize("name", MODELS)
def test_every_stdlib_fit_goes_to_arviz(name):
    model, dataset, fit = _fit(name)
    idata = fit.to_arviz(draws=50, seed=1, data=dataset.data)
    summary = az.summary(idata, kind="stats")
    plan = model.stages.plan
    assert len(summary) > 0 and np.isfinite(summary["mean"]).all()
    assert idata.attrs["model_source_hash"] == source_hash(model.stages.model.source.text)
    np.testing.assert_array_equal(idata.sample_stats["elbo"].values, fit.elbo)
    for factor in fit.factors():
        for part in factor.parts:
            if factor.introduced or (factor.discrete and factor.local):
                continue
            array = idata.posterior[part.name]
            assert array.dims[:2] == ("chain", "draw") and array.shape[:2] == (1, 50)
            var = owner(plan.model, part.name)
            assert array.dims[2:2 + len(var.plates)] == var.plates  # the plates' names
    assert set(model.module.SPEC["observed"]) <= set(idata.observed_data.data_vars)


def test_lda_axes_and_vocabulary_coordinates():
    model, dataset, fit = _fit("lda")
    words = [f"w{i}" for i in range(fit.dims["V"])]
    idata = fit.to_arviz(draws=20, seed=0, coords={"V": words}, data=dataset.data)
    assert idata.observed_data["w"].dims == ("docs", "V")  # the count matrix of the tokens
    assert idata.posterior["beta"].dims == ("chain", "draw", "topics", "V")
    assert idata.posterior["theta"].dims == ("chain", "draw", "docs", "topics")
    assert list(idata.posterior["V"].values) == words
    assert idata.variational["beta.alpha"].dims == ("topics", "V")
    np.testing.assert_allclose(idata.posterior["beta"].sum("V"), 1.0)
    with pytest.raises(CemError, match="coords"):
        fit.to_arviz(draws=5, coords={"V": words[:-1]})
    with pytest.raises(CemError, match="no dimension or plate"):
        fit.to_arviz(draws=5, coords={"vocabulary": words})
    topics = [f"t{k}" for k in range(fit.dims["K"])]
    table = fit.summary(coords={"V": words, "K": topics})
    assert "beta[t1, w3]" in table.index and "theta[0, t2]" in table.index


def test_sequences_are_concatenated_along_their_plate():
    model, dataset, fit = _fit("hmm")
    x = fit.to_arviz(draws=5, seed=0, data=dataset.data).observed_data["x"]
    assert x.dims == ("steps",) and x.size == sum(len(s) for s in dataset.data["x"])
    assert list(x["seqs_index"].values[:len(dataset.data["x"][0]) + 1]) == [0] * len(
        dataset.data["x"][0]) + [1]


def test_gmm_draws_match_the_means_and_locals_follow_the_limit():
    model, dataset, fit = _fit("gmm")
    idata = fit.to_arviz(draws=4000, seed=0)
    assert idata.posterior["Lambda"].dims[2:] == ("components", "D", "D_2")
    assert idata.posterior["z"].dims == ("chain", "draw", "points")  # 4000 × 66 ≤ 10⁶ labels
    draws = idata.posterior["mu"].values[0]
    sd = np.sqrt(np.diagonal(np.linalg.inv(fit["mu.precision"]), axis1=1, axis2=2))
    assert np.all(np.abs(draws.mean(0) - fit.mean("mu")) < 5 * sd / np.sqrt(4000))
    assert "z" not in fit.to_arviz(draws=10, seed=0, discrete_locals=False).posterior
    z = next(f for f in fit.factors() if f.name == "z")
    items = fit.dims["N"]
    assert kept(z, DISCRETE_LIMIT // items, None) and not kept(z, DISCRETE_LIMIT // items + 1,
                                                                None)


def test_summary_is_the_closed_form_table():
    model, dataset, fit = _fit("hierarchical_normal")
    table = fit.summary(hdi_prob=0.9)
    assert list(table.columns) == ["mean", "sd", "eti_5%", "eti_95%"]
    assert {"mu", "tau_b", "tau_w", "theta[0]"} <= set(table.index)
    assert table.loc["tau_w", "mean"] == pytest.approx(
        fit["tau_w.shape"] / fit["tau_w.rate"], rel=1e-12)
    with pytest.raises(CemError, match="hdi_prob"):
        fit.summary(hdi_prob=1.5)


def test_plots_run_on_the_export(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    model, dataset, fit = _fit("gmm_normal_wishart")
    idata = fit.to_arviz(draws=200, seed=0)
    with warnings.catch_warnings():  # arviz 0.23's forest plot uses a deprecated mpl call
        warnings.simplefilter("ignore", matplotlib.MatplotlibDeprecationWarning)
        az.plot_posterior(idata, var_names=["pi"])
        az.plot_forest(idata, var_names=["mu"], combined=True)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_cli_nc_reloads_with_the_means_of_the_npz(tmp_path, capsys):
    model, dataset, _ = _fit("gmm_normal_wishart")
    data = tmp_path / "points.npz"
    np.savez(data, **dataset.data)
    path = str(model.path)
    for out, draws in (("fit.nc", ["--draws", "30"]), ("fit.npz", [])):  # .nc's option
        assert main(["fit", path, "--data", str(data), "--quiet", "--max-iter", "5",
                     "-o", str(tmp_path / out), *draws]) == 0
    tree = xr.open_datatree(tmp_path / "fit.nc")
    assert set(tree.children) >= {"posterior", "observed_data", "sample_stats", "variational"}
    assert tree["posterior"]["mu"].dims == ("chain", "draw", "components", "D")
    with np.load(tmp_path / "fit.npz") as npz:
        for key, value in tree["variational"].data_vars.items():
            np.testing.assert_allclose(value.values, npz[key], rtol=1e-12, atol=0)
    tree.close()
    nc, npz = (cemodel.load_result(tmp_path / f, model) for f in ("fit.nc", "fit.npz"))
    for var in ("pi", "mu", "Lambda"):
        np.testing.assert_allclose(nc.mean(var), npz.mean(var), rtol=1e-12, atol=0)
    capsys.readouterr()
    assert main(["summarize", str(tmp_path / "fit.npz"), "--model", path]) == 0
    out = capsys.readouterr().out
    assert "intervals (mean, sd and the central 0.94 interval" in out
    assert "eti_3%" in out and "Lambda[0, 0, 0]" in out and "mu[0, 0]" in out
    assert main(["summarize", str(tmp_path / "fit.nc"), "--model", path]) == 0
    assert capsys.readouterr().out.split("\n", 1)[1] == out.split("\n", 1)[1]  # as the .npz


@pytest.mark.parametrize("suffix", [".npz", ".nc"])
def test_saved_fit_round_trip(tmp_path, suffix):
    model, dataset, fit = _fit("lda")
    saved = cemodel.load_result(fit.save(tmp_path / f"lda{suffix}"), model)
    assert (saved.method, saved.local, saved.seed, saved.dims) == (
        fit.method, fit.local, fit.seed, fit.dims)
    np.testing.assert_array_equal(saved.elbo, fit.elbo)
    for key in fit.posterior:
        np.testing.assert_array_equal(saved[key], fit[key])
    for key in fit.state:
        np.testing.assert_array_equal(saved.state[key], fit.state[key])
    new = {"w": dataset.data["w"][:5]}
    np.testing.assert_allclose(model.infer(new, saved).mean("theta"),
                               model.infer(new, fit).mean("theta"), rtol=1e-12)


def test_saved_fit_of_another_model_or_format_is_refused(tmp_path):
    model, dataset, fit = _fit("beta_bernoulli")
    path = fit.save(tmp_path / "fit.npz")
    other = tmp_path / "other.cem"
    other.write_text(model.path.read_text().replace("hyper a = 2.0", "hyper a = 3.0"))
    with pytest.raises(CemError, match="another model source"):
        cemodel.load_result(path, cemodel.Model(other))
    with np.load(path) as npz:
        arrays = dict(npz)
    meta = json.loads(arrays["cemodel:meta"].tobytes())
    meta["cemodel_format_version"] = 99
    arrays["cemodel:meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(tmp_path / "future.npz", **arrays)
    with pytest.raises(CemError, match="format version 99"):
        cemodel.load_result(tmp_path / "future.npz", model)
    np.savez(tmp_path / "plain.npz", elbo=fit.elbo)
    with pytest.raises(CemError, match="not a saved fit"):
        cemodel.load_result(tmp_path / "plain.npz", model)


@pytest.mark.parametrize("suffix", [".npz", ".nc"])
def test_the_cli_refuses_a_fit_of_another_model_source(tmp_path, capsys, suffix):
    """`cemodel predict`, `summarize --model` and `plot --model` refuse what load_result
    refuses (they read b = 0.1's posterior as b = 50's without a word); a posterior with no
    record of its source is read as before."""
    model, dataset, fit = _fit("beta_bernoulli")
    path = str(fit.save(tmp_path / f"fit{suffix}"))
    data = tmp_path / "coins.npz"
    np.savez(data, **dataset.data)
    other = tmp_path / "other.cem"
    other.write_text(model.path.read_text().replace("hyper a = 2.0", "hyper a = 3.0"))
    commands = {"predict": ["predict", other, path, data, "-o", tmp_path / "pp.npz"],
                "summarize": ["summarize", path, "--model", other],
                "plot": ["plot", path, "--model", other, "-o", tmp_path / "p.svg"]}
    for argv in commands.values():
        capsys.readouterr()
        assert main([str(a) for a in argv]) == 2
        err = capsys.readouterr().err
        assert f"error: {path} is a fit of another model source" in err, err
    assert not (tmp_path / "pp.npz").exists() and not (tmp_path / "p.svg").exists()
    for argv in commands.values():  # the file it was fitted with
        assert main([str(a) if a != other else str(model.path) for a in argv]) == 0
    np.savez(tmp_path / "plain.npz", **{k: fit[k] for k in fit.posterior}, elbo=fit.elbo)
    assert main(["summarize", str(tmp_path / "plain.npz"), "--model", str(other)]) == 0


def test_without_arviz_to_arviz_names_the_extra(monkeypatch, tmp_path):
    model, dataset, fit = _fit("beta_bernoulli")
    monkeypatch.setitem(sys.modules, "arviz", None)  # import arviz raises ImportError
    with pytest.raises(CemError) as refused:
        fit.to_arviz()
    assert "cemodel[arviz]" in refused.value.render()
    data = tmp_path / "x.npz"
    np.savez(data, **dataset.data)
    assert main(["fit", str(model.path), "--data", str(data), "-o",
                 str(tmp_path / "fit.nc"), "--quiet"]) == 2
    assert not (tmp_path / "fit.nc").exists()


def test_fitted_estimator_through_joblib(tmp_path):
    joblib = pytest.importorskip("joblib")
    pytest.importorskip("sklearn")
    model = cemodel.Model("gmm")
    X = make_data(model.module.SPEC, 0).data["x"]
    est = cemodel.CemEstimator(model="gmm", K=3, max_iter=5).fit(X)
    joblib.dump(est, tmp_path / "est.joblib")
    loaded = joblib.load(tmp_path / "est.joblib")
    np.testing.assert_allclose(loaded.transform(X[:7]), est.transform(X[:7]), rtol=1e-12)


def test_after_the_fit_example(tmp_path, capsys):
    import runpy

    pytest.importorskip("matplotlib")
    sys_argv = sys.argv
    sys.argv = ["after_the_fit.py", "--out", str(tmp_path / "fig.png"), "--save",
                str(tmp_path / "fit.npz")]
    try:
        runpy.run_path(str(REPO / "examples" / "after_the_fit.py"), run_name="__main__")
    finally:
        sys.argv = sys_argv
    out = capsys.readouterr().out
    assert "eti_97%" in out and (tmp_path / "fig.png").stat().st_size > 0
    assert cemodel.load_result(tmp_path / "fit.npz", "hierarchical_normal").method == "mf"


def test_an_out_of_core_fit_exports_its_globals(tmp_path):
    model = cemodel.Model("lda")
    from scipy import sparse

    sparse.save_npz(tmp_path / "w.npz", sparse.csr_matrix(np.ones((30, 8))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = model.fit(model.stream(tmp_path / "w.npz"), "svi", epochs=1, batch_size=20,
                        dims={"K": 3})
    posterior = fit.to_arviz(draws=10, seed=0).posterior
    assert "beta" in posterior and "theta" not in posterior  # one minibatch's locals: none
    assert "theta[0, 0]" not in fit.summary().index


def test_stick_breaking_weights_are_drawn_with_their_sticks():
    """The posterior holds the weights π that the drawn sticks break into, on the sticks'
    axes (cemodel fits the sticks; π is the model file's variable)."""
    _, _, fit = _fit("dp_gmm")
    idata = fit.to_arviz(draws=30, seed=0)
    pi, sticks = idata.posterior["pi"], idata.posterior["pi_sticks"]
    assert pi.dims == sticks.dims
    np.testing.assert_allclose(pi.sum(pi.dims[-1]), 1.0, rtol=1e-12)
    np.testing.assert_allclose(pi.values[..., 0], sticks.values[..., 0])  # π_1 = v_1


PLATE_NAMES = """model clash
dim K = 3
dim D
dim N
hyper m0 = zeros(D)
hyper nu0 = D + 2

pi ~ Dirichlet(1.0, K)
plate pi k in K:
    mu[k] ~ MultivariateNormal(m0, eye(D) * 0.01)
    Lambda[k] ~ Wishart(nu0, eye(D))

plate D n in N:
    z[n] ~ Categorical(pi)
    observe x[n] ~ MultivariateNormal(mu[z[n]], Lambda[z[n]])
"""


def test_plates_named_like_a_dimension_or_a_variable_get_their_own_axes(tmp_path):
    """`plate D n in N` beside `dim D`, `plate pi` beside the variable pi: the language takes
    them, so the export does too, the plates' axes named NAME_plate (xarray wants one size per
    axis name, and would make the variable pi the coordinate of an axis pi)."""
    source = tmp_path / "clash.cem"
    source.write_text(PLATE_NAMES)
    model = cemodel.Model(source)
    x = np.random.default_rng(0).normal(size=(40, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = model.fit({"x": x}, max_iter=5)
    idata = fit.to_arviz(draws=5, seed=0, data={"x": x}, coords={"pi": ["a", "b", "c"]})
    assert idata.posterior["z"].dims == ("chain", "draw", "D_plate")
    assert idata.posterior["Lambda"].dims == ("chain", "draw", "pi_plate", "D", "D_2")
    assert idata.posterior["pi"].dims == ("chain", "draw", "pi_plate")
    assert list(idata.posterior["pi_plate"].values) == ["a", "b", "c"]
    assert idata.observed_data["x"].dims == ("D_plate", "D")
    assert "mu[b, 1]" in fit.summary(coords={"pi": ["a", "b", "c"]}).index
    saved = cemodel.load_result(fit.save(tmp_path / "fit.nc", draws=5), model)
    np.testing.assert_array_equal(saved.mean("mu"), fit.mean("mu"))


def test_labels_of_another_length_are_refused_naming_what_was_given():
    """summary() labelled part of an axis with too few labels; to_arviz named the axis
    (coords['components']) where the user wrote K. Both refuse, naming the key given."""
    _, _, fit = _fit("poisson_mixture")
    k = fit.dims["K"]
    for call in (fit.summary, lambda **kw: fit.to_arviz(draws=3, seed=0, **kw)):
        with pytest.raises(CemError) as refused:
            call(coords={"K": ["low"] * (k - 1)})
        assert refused.value.message == (
            f"coords['K']: expected {k} labels for axis 'components', found {k - 1} labels")
    table = fit.summary(coords={"components": [f"c{i}" for i in range(k)]})
    assert f"rate[c{k - 1}]" in table.index


def test_exported_data_is_checked_as_the_fit_reads_it(tmp_path):
    """data= of to_arviz / save(.nc) is read as the fit read it: a masked entry exported
    missing (NaN), not its hidden value; a misspelled name, another size or text refused; a
    sparse matrix past 10⁶ cells exported as its stored entries, not left out."""
    from scipy import sparse

    rng = np.random.default_rng(0)
    x = rng.poisson(np.array([2.0, 20.0])[rng.choice(2, 100)])
    masked = np.ma.masked_array(x, mask=np.isin(np.arange(100), [0, 5]))
    model = cemodel.Model("poisson_mixture", K=2)
    fit = model.fit({"x": masked}, seed=0, max_iter=5)
    observed = fit.to_arviz(draws=3, seed=0, data={"x": masked}).observed_data["x"].values
    assert np.isnan(observed[[0, 5]]).all() and observed[1] == x[1]
    for data, refused in (({"xx": x}, "unknown data 'xx'; the model expects: x"),
                          ({"x": x[:10]}, "'N' is 100 from the fit but 10 from data 'x'"),
                          ({"x": "hello"}, "expected numbers, found text")):
        with pytest.raises(CemError, match=refused):
            fit.to_arviz(draws=3, data=data)
        with pytest.raises(CemError, match=refused):
            fit.save(tmp_path / "fit.nc", draws=3, data=data)
    assert not (tmp_path / "fit.nc").exists()
    w = sparse.random(1001, 1000, density=0.002, random_state=0, format="csr",
                      data_rvs=lambda n: rng.integers(1, 3, n)).astype(int)
    lda = cemodel.Model("lda", K=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entries = lda.fit({"w": w}, seed=0, max_iter=2).to_arviz(
            draws=2, seed=0, data={"w": w}).observed_data
    coo = w.tocoo()
    assert entries["w"].dims == ("w_nonzero",)
    np.testing.assert_array_equal(entries["w"].values, coo.data)
    np.testing.assert_array_equal(entries["docs_index"].values, coo.row)
    np.testing.assert_array_equal(entries["V_index"].values, coo.col)


def test_save_refuses_options_it_does_not_use(tmp_path):
    """An .npz ignored draws/data/coords; a misspelled option of an .nc was a TypeError naming
    an internal function. Both are refused naming the options, the format and Fit.save's."""
    model, dataset, fit = _fit("beta_bernoulli")
    with pytest.raises(CemError, match=r"draws, data apply to an \.nc .*not to an \.npz"):
        fit.save(tmp_path / "fit.npz", draws=3, data=dataset.data)
    with pytest.raises(CemError) as refused:
        fit.save(tmp_path / "fit.nc", nsamples=3)
    assert refused.value.message == (
        "Fit.save: unknown option 'nsamples'; it takes the path and, for an .nc, draws, seed, "
        "data, coords, discrete_locals")
    assert not list(tmp_path.iterdir())
    assert fit.save(tmp_path / "fit.nc", draws=3, seed=0).is_file()


def test_summarize_without_the_model_lists_a_block_once(tmp_path, capsys):
    """Without --model, a joint block's precision was listed twice (as BLOCK.precision and as
    its member's own marginal): the file records its blocks, so the table is --model's."""
    model, dataset, _ = _fit("hierarchical_normal")
    data = tmp_path / "hn.npz"
    np.savez(data, **dataset.data)
    path = str(model.path)
    tables = []
    for out in ("fit.npz", "fit.nc"):
        assert main(["fit", path, "--data", str(data), "--quiet", "--max-iter", "5",
                     "-o", str(tmp_path / out)]) == 0
        for extra in ([], ["--model", path]):
            capsys.readouterr()
            assert main(["summarize", str(tmp_path / out), *extra]) == 0
            tables.append(capsys.readouterr().out.split("\nintervals", 1)[1])
    assert "mu_tau_b" not in tables[0] and tables[0].count("\n  tau_b ") == 1
    assert tables[0] == tables[1] and tables[2] == tables[3]
