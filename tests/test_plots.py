"""`cemodel plot` and `cemodel summarize` on posteriors written by `cemodel fit`."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("CEMODEL_CACHE", str(REPO / ".cemodel_cache" / "tests"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from cemodel.cli import main  # noqa: E402
from cemodel.compiler import read_source  # noqa: E402
from cemodel.posterior_files import load_posterior, recognise  # noqa: E402
from cemodel.resolve import build_model  # noqa: E402
from cemodel.syntax import parse  # noqa: E402

MODELS = REPO / "stdlib_models"
LDA, GMM, COIN = MODELS / "lda.cem", MODELS / "gmm.cem", MODELS / "beta_bernoulli.cem"
CENTRES = np.array([[0.0, 0.0], [5.0, 4.0]])
V = 24
VOCAB = [f"word{v:02d}" for v in range(V)]


def _fit(model: Path, data: Path, out: Path, *settings: str) -> Path:
    argv = ["fit", str(model), "--data", str(data), "-o", str(out), "--quiet"]
    for setting in settings:
        argv += ["--set", setting]
    assert main(argv) == 0
    return out


@pytest.fixture(scope="module")
def lda_fit(tmp_path_factory):
    """Two topics over disjoint halves of a 24-word vocabulary; 30 documents."""
    folder = tmp_path_factory.mktemp("lda")
    rng = np.random.default_rng(3)
    counts = np.zeros((30, V), dtype=np.int64)
    for d in range(30):
        half = d % 2
        words = rng.integers(0, V // 2, size=40) + half * (V // 2)
        np.add.at(counts[d], words, 1)
    np.savez(folder / "corpus.npz", w=counts)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    post = _fit(LDA, folder / "corpus.npz", folder / "post.npz", "K=2")
    return folder, post


@pytest.fixture(scope="module")
def gmm_fit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gmm")
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(c, 0.5, size=(60, 2)) for c in CENTRES])
    np.savez(folder / "points.npz", x=x)
    post = _fit(GMM, folder / "points.npz", folder / "post.npz", "K=2")
    return folder, post


def _not_blank(path: Path) -> None:
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image[..., :3].std() > 0.05
    assert path.stat().st_size > 20_000


# -- summarize ---------------------------------------------------------------------------------


def test_summarize_lda_top_words(lda_fit, capsys):
    folder, post = lda_fit
    capsys.readouterr()
    assert main(["summarize", str(post), "--vocab", str(folder / "vocab.txt"), "--top", "5"]) == 0
    out = capsys.readouterr().out
    with np.load(post) as npz:
        elbo = npz["elbo"]
    assert f"ELBO: final {elbo[-1]:.6e} after {elbo.size} iteration" in out
    assert "beta.alpha" in out and "(2, 24)" in out and "theta.alpha" in out
    assert "topics (beta: posterior mean, top 5 words):" in out
    assert "topics (theta" not in out  # document proportions are not topics
    rows = [line for line in out.splitlines() if line.strip().startswith(("0:", "1:"))]
    assert len(rows) == 2
    # each topic's top words come from one half of the vocabulary, the two halves differ
    halves = []
    for row in rows:
        words = [w for w in row.split() if w.startswith("word")]
        assert len(words) == 5
        ids = [int(w[4:]) for w in words]
        assert len({i // (V // 2) for i in ids}) == 1, row
        halves.append(ids[0] // (V // 2))
    assert sorted(halves) == [0, 1]


def test_summarize_gmm_with_model(gmm_fit, capsys):
    folder, post = gmm_fit
    capsys.readouterr()
    assert main(["summarize", str(post), "--model", str(GMM)]) == 0
    out = capsys.readouterr().out
    assert "(model gmm, gmm.cem)" in out
    assert "weights (pi: posterior mean, largest first):" in out
    assert "2-D components (mu, Lambda):" in out
    lines = out.splitlines()
    assert any(line.split()[:3] == ["Lambda", "Wishart", "global"] and "2 × 2" in line
               for line in lines)
    assert any(line.split()[:3] == ["z", "Categorical", "local"] for line in lines)


def test_recognised_gmm_components_match_the_data(gmm_fit):
    _, post = gmm_fit
    text, name = read_source(GMM)
    posterior = load_posterior(post, build_model(parse(text, name)))
    topics, weights, clusters = recognise(posterior)
    assert topics == []
    assert len(weights) == 1 and weights[0].var.name == "pi"
    np.testing.assert_allclose(np.sort(weights[0].weights), [0.5, 0.5], atol=0.02)
    (c,) = clusters
    order = np.argsort(c.means[:, 0])
    np.testing.assert_allclose(c.means[order], CENTRES, atol=0.25)
    sd = np.sqrt(np.diagonal(c.covariances, axis1=1, axis2=2))
    np.testing.assert_allclose(sd, 0.5, atol=0.15)


MIXTURE_OF_REGRESSIONS = """model mixture_of_regressions
dim K = 2
dim P = 2
dim N
pi ~ Dirichlet(1.0, K)
plate comps k in K:
    w[k] ~ MultivariateNormal(zeros(P), 0.01 * eye(P))
plate points n in N:
    data x[n] : vector(P)
    z[n] ~ Categorical(pi)
    observe y[n] ~ Normal(dot(w[z[n]], x[n]), 1.0)
"""


def test_regression_weights_are_not_taken_for_cluster_means(tmp_path):
    """A mixture's 2-D regression weights w[k] were recognised (and plotted over the data)
    as 2-D component means; with the model only the mean of observed points is."""
    model = tmp_path / "mixreg.cem"
    model.write_text(MIXTURE_OF_REGRESSIONS)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 2))
    z = rng.integers(0, 2, 80)
    y = np.einsum("nd,nd->n", x, np.array([[2.0, -1.0], [-2.0, 1.0]])[z]) + rng.normal(size=80)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    post = _fit(model, tmp_path / "data.npz", tmp_path / "post.npz")
    text, name = read_source(model)
    assert recognise(load_posterior(post, build_model(parse(text, name))))[2] == []
    assert len(recognise(load_posterior(post))[2]) == 1  # without the model: taken for one


def test_summarize_without_recognised_summaries(tmp_path, capsys):
    x = (np.random.default_rng(1).random(30) < 0.4).astype(float)
    np.savez(tmp_path / "coin.npz", x=x)
    post = _fit(COIN, tmp_path / "coin.npz", tmp_path / "post.npz")
    capsys.readouterr()
    assert main(["summarize", str(post)]) == 0
    out = capsys.readouterr().out
    assert "p.a" in out and "p.b" in out
    mean = (2 + x.sum()) / (5 + x.size)
    assert any(line.split()[:2] == ["p", "Beta"] and f"{mean:.4f}"[:5] in line
               for line in out.splitlines())
    assert "topics" not in out and "weights" not in out


# -- plot --------------------------------------------------------------------------------------


def test_plot_lda(lda_fit, tmp_path, capsys):
    folder, post = lda_fit
    out = tmp_path / "lda.png"
    assert main(["plot", str(post), "-o", str(out), "--vocab", str(folder / "vocab.txt")]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    _not_blank(out)
    assert [p.name for p in tmp_path.iterdir()] == ["lda.png"]


def test_plot_gmm_with_points(gmm_fit, tmp_path, capsys):
    folder, post = gmm_fit
    out = tmp_path / "gmm.png"
    assert main(["plot", str(post), "--model", str(GMM), "--data", str(folder / "points.npz"),
                 "-o", str(out)]) == 0
    capsys.readouterr()
    _not_blank(out)


def test_plot_formats_and_default_name(gmm_fit, tmp_path, capsys):
    _, post = gmm_fit
    for suffix in ("svg", "pdf"):
        out = tmp_path / f"gmm.{suffix}"
        assert main(["plot", str(post), "-o", str(out)]) == 0
        assert out.stat().st_size > 5_000
    copy = tmp_path / "copy.npz"
    copy.write_bytes(post.read_bytes())
    assert main(["plot", str(copy)]) == 0
    assert f"wrote {tmp_path / 'copy.png'}" in capsys.readouterr().out


# -- mistakes ----------------------------------------------------------------------------------


def _fails(argv, capsys, *expected):
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2, err
    for text in expected:
        assert text in err, err
    assert "Traceback" not in err


def test_bad_posteriors_exit_2(tmp_path, capsys):
    out = tmp_path / "out" / "fig.png"
    _fails(["summarize", str(tmp_path / "nope.npz")], capsys, "no such posterior file")
    (tmp_path / "text.npz").write_text("not a zip")
    _fails(["plot", str(tmp_path / "text.npz"), "-o", str(out)], capsys,
           "cannot read posterior", "cemodel fit")
    np.save(tmp_path / "one.npy", np.zeros(3))
    _fails(["summarize", str(tmp_path / "one.npy")], capsys, "cannot read posterior",
           "not the named arrays of an .npz")
    np.savez(tmp_path / "data.npz", x=np.zeros(3))
    _fails(["plot", str(tmp_path / "data.npz"), "-o", str(out)], capsys,
           "is not a posterior written by cemodel fit: it has no 'elbo' array")
    assert not out.parent.exists()


def test_mismatched_model_vocab_and_data_exit_2(lda_fit, gmm_fit, tmp_path, capsys):
    folder, lda_post = lda_fit
    _, gmm_post = gmm_fit
    out = tmp_path / "fig.png"
    _fails(["summarize", str(lda_post), "--model", str(GMM)], capsys,
           "is a fit of another model source: model 'lda'")
    with np.load(lda_post) as npz:  # a posterior with no record of its model source
        legacy = {k: v for k, v in npz.items() if k != "cemodel:meta"}
    np.savez(tmp_path / "legacy.npz", **legacy)
    _fails(["summarize", str(tmp_path / "legacy.npz"), "--model", str(GMM)], capsys,
           "holds variable 'beta', which model 'gmm' has not", "is --model the model")
    short = tmp_path / "short.txt"
    short.write_text("a\nb\nc\n")
    _fails(["plot", str(lda_post), "--vocab", str(short), "-o", str(out)], capsys,
           "--vocab has 3 words", "24")
    _fails(["plot", str(gmm_post), "--data", str(folder / "corpus.npz"), "-o", str(out)],
           capsys, "expected one N × 2 array")
    _fails(["plot", str(lda_post), "--data", str(folder / "corpus.npz"), "-o", str(out)],
           capsys, "the points are drawn under a 2-D mixture's clusters", "has none")
    _fails(["plot", str(gmm_post), "-o", str(tmp_path / "fig.jpeg")], capsys,
           "cemodel plot writes .png, .svg or .pdf, found '.jpeg'")
    with pytest.raises(SystemExit) as info:  # refused as the command line is read
        main(["summarize", str(gmm_post), "--top", "0"])
    assert info.value.code == 2
    assert "argument --top: expected a whole number >= 1" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["legacy.npz", "short.txt"]


@pytest.mark.parametrize("command", ["plot", "summarize"])
def test_help_has_examples(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert f"cemodel {command} post.npz" in out


def test_a_normal_wishart_block_posterior_summarizes_and_plots(gmm_fit, tmp_path, capsys):
    """gmm_normal_wishart.cem fits (mu, Lambda) as one block mu_Lambda; the posterior also
    holds the members' marginals, from which the clusters are recognised, with or without
    --model."""
    folder, _ = gmm_fit
    model = MODELS / "gmm_normal_wishart.cem"
    post = _fit(model, folder / "points.npz", tmp_path / "nw.npz", "K=2")
    for extra in ([], ["--model", str(model)]):
        capsys.readouterr()
        assert main(["summarize", str(post), *extra]) == 0
        out = capsys.readouterr().out
        assert "2-D components (mu, Lambda):" in out, extra
        lines = out.splitlines()
        assert any(line.split()[:2] == ["mu_Lambda", "Normal-Wishart"] for line in lines)
        assert any(line.split()[:2] == ["Lambda", "Wishart"] for line in lines)
    from cemodel.compiler import fitted_model

    posterior = load_posterior(post, fitted_model(*read_source(model)))
    (c,) = recognise(posterior)[2]
    order = np.argsort(c.means[:, 0])
    np.testing.assert_allclose(c.means[order], CENTRES, atol=0.25)
    out = tmp_path / "nw.png"
    assert main(["plot", str(post), "-o", str(out), "--model", str(model)]) == 0
    _not_blank(out)


def test_an_hmm_transition_table_is_not_taken_for_topics(tmp_path):
    """A MarkovChain's transition rows A[k] (a Dirichlet table read by the chain, not by
    data) were summarised as 'topics ... top words'; with the model only tables of observed
    categories are (the emission table phi)."""
    model = tmp_path / "hmm.cem"
    model.write_text((Path(__file__).parent.parent / "stdlib_models" / "hmm.cem").read_text())
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "seqs.npz", x=np.array([rng.integers(0, 5, 30) for _ in range(3)]))
    post = _fit(model, tmp_path / "seqs.npz", tmp_path / "post.npz")
    text, name = read_source(model)
    topics = recognise(load_posterior(post, build_model(parse(text, name))))[0]
    assert [t.var.name for t in topics] == ["phi"]
