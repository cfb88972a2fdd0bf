"""Out of core: SVI reading its minibatches from disk follows the in-memory trajectory.

Every format (.npy, .npz by name and ragged, sparse .npz, MatrixMarket, UCI docword) is
written from data that an in-memory fit also gets; with the same seed and a start that does
not look at the data, the two fits must agree: the same minibatches, the same local steps in
the same order, so the globals agree to round-off and the ELBO (summed over chunks) to 1e-9
relative.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from scipy import sparse

import cemodel
from cemodel.api import Model
from cemodel.cli import main
from cemodel.errors import CemDataError, CemError
from cemodel.streaming import open_source

REPO = Path(__file__).resolve().parents[1]
LIB = REPO / "stdlib_models"


@pytest.fixture(scope="module")
def lda():
    return Model("lda")


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(0)
    n_docs, n_words, k = 150, 40, 3
    topics = rng.dirichlet(np.full(n_words, 0.1), k)
    rows = [rng.multinomial(rng.integers(5, 40), rng.dirichlet(np.full(k, 0.3)) @ topics)
            for _ in range(n_docs)]
    rows[7] = np.zeros(n_words)  # an empty document
    return sparse.csr_array(np.array(rows, dtype=np.float64))


def write_docword(path: Path, counts: sparse.csr_array, shuffle: bool = False) -> Path:
    coo = counts.tocoo()
    lines = [f"{r + 1} {c + 1} {int(v)}" for r, c, v in
             zip(coo.row, coo.col, coo.data, strict=True)]
    if shuffle:
        np.random.default_rng(1).shuffle(lines)
    text = f"{counts.shape[0]}\n{counts.shape[1]}\n{len(lines)}\n" + "\n".join(lines) + "\n"
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def same_fit(a, b, keys) -> None:
    np.testing.assert_allclose(b.elbo, a.elbo, rtol=1e-9)
    for key in keys:
        np.testing.assert_allclose(b.posterior[key], a.posterior[key], rtol=1e-10, atol=1e-12)


SVI = dict(epochs=3, batch_size=32, seed=3, start="random")


@pytest.mark.parametrize("form", ["docword", "docword_shuffled_gz", "mtx", "sparse_npz",
                                  "ragged_npz"])
def test_lda_streamed_from_every_sparse_format_equals_in_memory(tmp_path, lda, corpus, form):
    if form == "docword":
        path = write_docword(tmp_path / "docword.test.txt", corpus)
    elif form == "docword_shuffled_gz":
        path = write_docword(tmp_path / "docword.test.txt.gz", corpus, shuffle=True)
    elif form == "mtx":
        path = tmp_path / "counts.mtx"
        scipy.io.mmwrite(path, sparse.coo_matrix(corpus))
    elif form == "sparse_npz":
        path = tmp_path / "counts.npz"
        sparse.save_npz(path, sparse.csr_matrix(corpus))
    else:  # token ids stored flat with offsets (the in-memory .npz convention)
        tokens = [np.repeat(np.arange(corpus.shape[1]), corpus[[d]].toarray()[0].astype(int))
                  for d in range(corpus.shape[0])]
        path = tmp_path / "tokens.npz"
        ptr = np.r_[0, np.cumsum([len(t) for t in tokens])]
        np.savez(path, w=np.concatenate(tokens), tokens_ptr=ptr)
        corpus = {"w": tokens}
    source = open_source(path, lda.module.SPEC, "docs", cache=tmp_path / "cache")
    assert source.n_items == 150
    data = corpus if isinstance(corpus, dict) else {"w": corpus}
    memory = lda.fit(data, "svi", dims={"K": 3}, **SVI)
    streamed = lda.fit(source, "svi", dims={"K": 3}, **SVI)
    same_fit(memory, streamed, ["beta.alpha", "E[log beta]"])
    assert "theta.alpha" not in streamed.posterior  # one minibatch's locals are not a result
    assert len(streamed.elbo) == 3
    assert streamed.dims == memory.dims  # every item counted, not the last minibatch's


@pytest.mark.parametrize("method, options", [
    ("svi+", {"effective_batch_size": 28}),
    ("ssvi-a", {}),
    ("ssvi", {}),
    ("svi", {"ramp": True, "learn": ("alpha",)}),
])
def test_every_stochastic_method_streams_the_same_trajectory(tmp_path, lda, corpus, method,
                                                             options):
    path = write_docword(tmp_path / "docword.test.txt", corpus)
    source = lda.stream(path)
    memory = lda.fit({"w": corpus}, method, dims={"K": 3}, **SVI, **options)
    streamed = lda.fit(source, method, dims={"K": 3}, **SVI, **options)
    same_fit(memory, streamed, ["beta.alpha"])
    assert streamed.hypers["alpha"] == pytest.approx(memory.hypers["alpha"], rel=1e-12)


def test_gibbs_and_cvb0_local_steps_stream_the_same_trajectory(tmp_path, lda, corpus):
    source = lda.stream(write_docword(tmp_path / "docword.test.txt", corpus))
    for local in ("gibbs", "cvb0"):
        memory = lda.fit({"w": corpus}, "svi", local=local, dims={"K": 3}, **SVI)
        streamed = lda.fit(source, "svi", local=local, dims={"K": 3}, **SVI)
        same_fit(memory, streamed, ["beta.alpha"])


def test_lda_from_a_dense_npy_count_matrix(tmp_path, lda, corpus):
    """A (documents × words) count matrix in an .npy file: its columns size the vocabulary,
    as in memory (its largest count does not: the values are counts, not word indices)."""
    dense = corpus.toarray().astype(np.int64)
    path = tmp_path / "counts.npy"
    np.save(path, dense)
    source = lda.stream(path)
    assert source.dims == {"V": dense.shape[1]}
    memory = lda.fit({"w": dense}, "svi", dims={"K": 3}, **SVI)
    streamed = lda.fit(source, "svi", dims={"K": 3}, **SVI)
    same_fit(memory, streamed, ["beta.alpha"])


def test_gaussian_mixture_from_npy_rows(tmp_path):
    gmm = Model("gmm", K=3)
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(m, 0.3, (60, 2)) for m in (-3.0, 0.0, 3.0)])
    path = tmp_path / "points.npy"
    np.save(path, x)
    source = gmm.stream(path)
    memory = gmm.fit({"x": x}, "svi", **SVI)
    streamed = gmm.fit(source, "svi", **SVI)
    same_fit(memory, streamed, ["mu.mean", "Lambda.scale", "pi.alpha"])
    assert streamed.dims == memory.dims and streamed.dims["N"] == 180
    assert gmm.sample_posterior_predictive(streamed, 2, 0)["x"].shape == (2, 180, 2)


def test_index_sizes_come_from_the_whole_file(tmp_path):
    """A group index seen only in some minibatches still sizes the groups: the source scans
    the file once, as the in-memory binding sees all of it."""
    model = Model("hierarchical_normal")
    rng = np.random.default_rng(4)
    group = np.r_[rng.integers(0, 4, 99), 9]  # group 9 only in the last item
    y = rng.normal(group.astype(float), 1.0)
    path = tmp_path / "groups.npz"
    np.savez(path, y=y, group=group)
    source = model.stream(path)
    assert source.dims == {"G": 10}
    options = {**SVI, "start": "prior"}  # a hierarchy's only start (it reads no data)
    memory = model.fit({"y": y, "group": group}, "svi", **options)
    streamed = model.fit(source, "svi", **options)
    assert streamed.dims["G"] == 10
    same_fit(memory, streamed, ["mu.mean"])


def test_hmm_sequences_stream_from_flat_npz(tmp_path):
    hmm = Model("hmm", K=2)
    rng = np.random.default_rng(5)
    seqs = [rng.integers(0, 3, rng.integers(3, 9)) for _ in range(40)]
    path = tmp_path / "seqs.npz"
    np.savez(path, x=np.concatenate(seqs), steps_ptr=np.r_[0, np.cumsum([len(s) for s in seqs])])
    memory = hmm.fit({"x": seqs}, "svi", **SVI)
    streamed = hmm.fit(hmm.stream(path), "svi", **SVI)
    same_fit(memory, streamed, ["A.alpha"])


def test_streamed_checkpoint_resumes_the_same_trajectory(tmp_path, lda, corpus):
    source = lda.stream(write_docword(tmp_path / "docword.test.txt", corpus))
    whole = lda.fit(source, "svi", dims={"K": 3}, **{**SVI, "epochs": 4})
    ckpt = tmp_path / "fit.ckpt"
    lda.fit(source, "svi", dims={"K": 3}, checkpoint=ckpt, **{**SVI, "epochs": 2})
    resumed = lda.fit(source, "svi", dims={"K": 3}, resume=ckpt, **{**SVI, "epochs": 4})
    same_fit(whole, resumed, ["beta.alpha"])
    other = write_docword(tmp_path / "docword.other.txt", corpus[:100])
    with pytest.raises(CemDataError, match="data differ"):
        lda.fit(lda.stream(other), "svi", dims={"K": 3}, resume=ckpt, **{**SVI, "epochs": 4})


def test_seeds_start_draws_from_one_minibatch_and_fits(tmp_path):
    """Streamed, k-means++ seeds come from one random minibatch rather than all items: a
    different start, which must fit as well as the in-memory one."""
    gmm = Model("gmm", K=3)
    rng = np.random.default_rng(6)
    x = np.concatenate([rng.normal(m, 0.3, (200, 2)) for m in (-4.0, 0.0, 4.0)])
    np.save(tmp_path / "points.npy", x)
    options = dict(epochs=10, batch_size=100, seed=0, tau=1.0, kappa=0.6)
    memory = gmm.fit({"x": x}, "svi", **options)
    streamed = gmm.fit(gmm.stream(tmp_path / "points.npy"), "svi", **options)
    assert streamed.elbo[-1] == pytest.approx(memory.elbo[-1], rel=0.01)
    assert np.all(np.diff(np.sort(streamed.posterior["mu.mean"][:, 0])) > 2.0)


def test_batch_methods_and_other_misuse_are_refused(tmp_path, lda, corpus):
    source = lda.stream(write_docword(tmp_path / "docword.test.txt", corpus))
    with pytest.raises(CemDataError, match="fit_svi and its variants"):
        lda.fit(source, "mf", dims={"K": 3})
    with pytest.raises(CemDataError, match="data on disk have 150 items"):
        lda.fit(source, "svi", dims={"K": 3, "D": 10}, epochs=1)
    single = tmp_path / "single.cem"
    single.write_text("model single\np ~ Beta(1.0, 1.0)\nobserve x ~ Bernoulli(p)\n")
    with pytest.raises(CemError, match="no data plate"):
        Model(single).stream(tmp_path / "docword.test.txt")
    csv = tmp_path / "x.csv"
    csv.write_text("1,2\n3,4\n")
    with pytest.raises(CemDataError, match="cannot be read out of core"):
        Model("gmm").stream(csv)


@pytest.mark.parametrize("text, message", [
    ("3\n5\n2\n1 2 1\n2 9 1\n", r"wordID in \[1, 5\].*found 9 on line 5"),
    ("3\n5\n2\n1 2 1\n4 1 1\n", r"docID in \[1, 3\].*found 4 on line 5"),
    ("3\n5\n3\n1 2 1\n2 1 1\n", "header says 3 entries, found 2"),
    ("3\n5\n1\n1 2 -1\n", "non-negative counts, found -1 on line 4"),
    ("3\nfive\n1\n1 2 1\n", "the first three lines"),
    ("3\n5\n1\n1 2\n", "expected 3 numbers per line"),
    ("3\n5\n2\n1 2 1\n1 x 1\n", "found 'x' on line 5, column 2"),
])
def test_bad_docword_files_are_refused_with_the_line_and_leave_nothing(tmp_path, lda, text,
                                                                       message):
    path = tmp_path / "docword.bad.txt"
    path.write_text(text)
    cache = tmp_path / "cache"
    with pytest.raises(CemDataError, match=message) as info:
        open_source(path, lda.module.SPEC, "docs", cache=cache)
    assert str(path) in str(info.value)
    assert not cache.exists() or not any(cache.iterdir())  # no half-converted store


def test_dense_matrix_market_is_refused(tmp_path, lda):
    path = tmp_path / "dense.mtx"
    scipy.io.mmwrite(path, np.ones((3, 2)))
    with pytest.raises(CemDataError, match="coordinate"):
        open_source(path, lda.module.SPEC, "docs", cache=tmp_path / "cache")


def test_conversion_is_cached(tmp_path, lda, corpus):
    path = write_docword(tmp_path / "docword.test.txt", corpus)
    cache = tmp_path / "cache"
    open_source(path, lda.module.SPEC, "docs", cache=cache)
    stores = list(cache.iterdir())
    assert len(stores) == 1 and (stores[0] / "meta.json").exists()
    open_source(path, lda.module.SPEC, "docs", cache=cache)
    assert list(cache.iterdir()) == stores


def test_fixed_inner_plates_stream(tmp_path):
    """Features of a fixed-size inner plate size the globals too: the same for every item."""
    model = Model("bernoulli_mixture", K=2)
    rng = np.random.default_rng(7)
    x = (rng.random((80, 6)) < np.where(np.arange(80)[:, None] < 40, 0.9, 0.1)).astype(float)
    np.save(tmp_path / "x.npy", x)
    memory = model.fit({"x": x}, "svi", **SVI)
    streamed = model.fit(model.stream(tmp_path / "x.npy"), "svi", **SVI)
    same_fit(memory, streamed, ["p.a", "p.b", "pi.alpha"])


def test_pmf_streams_statistics_kept_per_rating(tmp_path):
    """PMF keeps its rating statistics per rating (one row per entry, not a users × items
    array): out of core those of each minibatch, and the ELBO adds them up a chunk at a time."""
    model = Model("pmf", K=2)
    rng = np.random.default_rng(8)
    user, item = rng.integers(0, 12, 150), rng.integers(0, 9, 150)
    y = rng.normal(size=150)
    assert model.module.ROLES["entry_statistic"] == ("acc_y_2", "acc_y_3")
    np.savez(tmp_path / "ratings.npz", y=y, user=user, item=item)
    options = {**SVI, "start": "random"}
    memory = model.fit({"y": y, "user": user, "item": item}, "svi", **options)
    streamed = model.fit(model.stream(tmp_path / "ratings.npz"), "svi", **options)
    np.testing.assert_allclose(streamed.elbo, memory.elbo, rtol=1e-10)
    same_fit(memory, streamed, ["u.mean", "v.mean", "tau.shape"])


def test_every_library_model_with_a_data_plate_streams():
    for path in sorted(LIB.glob("*.cem")):
        module = cemodel.compile(path)
        if hasattr(module, "fit_svi"):
            assert module.STREAMING == "yes", path.name


def test_cli_fit_stream(tmp_path, corpus, capsys):
    path = write_docword(tmp_path / "docword.test.txt", corpus)
    out = tmp_path / "post.npz"
    assert main(["fit", str(LIB / "lda.cem"), "--set", "K=3", "--data", str(path), "--method",
                 "svi", "--stream", "--epochs", "2", "--batch-size", "32", "--quiet", "-o",
                 str(out)]) == 0
    assert "beta.alpha" in np.load(out).files
    assert main(["fit", str(LIB / "lda.cem"), "--data", str(path), "--stream", "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "--stream: --method mf visits every item" in err
    assert "Traceback" not in err


DICE = """model dice
dim K = 6
dim N
hyper alpha = 1.0
p ~ Dirichlet(alpha, K)
plate rolls n in N:
    observe x[n] ~ Categorical(p)
"""


@pytest.fixture(scope="module")
def dice(tmp_path_factory):
    path = tmp_path_factory.mktemp("dice") / "dice.cem"
    path.write_text(DICE)
    return Model(path)


def test_streamed_data_errors_name_the_item_in_the_file(tmp_path, dice, lda, corpus):
    """A bad value is reported where it is in the file, as in memory, not at its position in
    the minibatch that read it: dense rows, ragged tokens and count-matrix rows."""
    x = np.random.default_rng(0).integers(0, 6, 500).astype(float)
    x[437] = 2.5
    np.save(tmp_path / "frac.npy", x)
    with pytest.raises(CemDataError, match=r"found 2\.5 at rolls\[437\]$"):
        dice.fit({"x": x}, "svi", **{**SVI, "start": "prior"})
    with pytest.raises(CemDataError, match=r"found 2\.5 at rolls\[437\]$"):
        dice.fit(dice.stream(tmp_path / "frac.npy"), "svi", **{**SVI, "start": "prior"})
    tokens = [np.arange(3.0) for _ in range(100)]
    tokens[71][2] = 1.5
    np.savez(tmp_path / "tokens.npz", w=np.concatenate(tokens),
             tokens_ptr=np.arange(0, 301, 3))
    with pytest.raises(CemDataError, match=r"found 1\.5 at docs\[71\], tokens\[2\]$"):
        lda.fit(lda.stream(tmp_path / "tokens.npz"), "svi", dims={"K": 3}, **SVI)
    counts = corpus.toarray()
    counts[120, 4] = 0.5
    np.save(tmp_path / "counts.npy", counts)
    with pytest.raises(CemDataError, match=r"found 0\.5 at row 120 \(docs\[120\]\), column 4"):
        lda.fit(lda.stream(tmp_path / "counts.npy"), "svi", dims={"K": 3}, **SVI)


def test_sizes_in_the_file_fill_only_the_dims_the_model_leaves_open(tmp_path, dice):
    """The model's `dim K = 6` stays 6 streamed, as in memory (the file's largest id + 1 sizes
    only a dim without default and not given), and an id at or above a fixed K is refused
    with the in-memory error (before the fit: the source binds the file chunk by chunk)."""
    x = np.random.default_rng(1).integers(0, 4, 300)
    np.save(tmp_path / "small.npy", x)
    options = {**SVI, "start": "prior"}
    memory = dice.fit({"x": x}, "svi", **options)
    streamed = dice.fit(dice.stream(tmp_path / "small.npy"), "svi", **options)
    assert streamed.posterior["p.alpha"].shape == (6,)
    same_fit(memory, streamed, ["p.alpha"])
    with pytest.raises(CemDataError, match=r"in \[0, K=3\), found 3 at rolls\["):
        dice.fit(dice.stream(tmp_path / "small.npy"), "svi", dims={"K": 3}, **options)
    x[100] = 7
    np.save(tmp_path / "bad.npy", x)
    message = r"expected category ids in \[0, K=6\), found 7 at rolls\[100\]"
    with pytest.raises(CemDataError, match=message):
        dice.fit({"x": x}, "svi", **options)
    with pytest.raises(CemDataError, match=message):
        dice.fit(dice.stream(tmp_path / "bad.npy"), "svi", **options)


@pytest.mark.parametrize("ptr, message", [
    ([0, 4, 2, 8], "non-decreasing integer offsets.*found 4 then 2 at positions 1 and 2"),
    ([0, 2, 4, 20], "'w' is stored flat for plate tokens, so expected 20 entries"),
    ([0.0, 2, 4, 8], "non-decreasing integer offsets.*found a float64 array"),
    ([3, 4, 6, 8], "non-decreasing integer offsets.*found offsets starting at 3"),
])
def test_bad_offsets_are_refused_streamed_as_in_memory(tmp_path, lda, ptr, message):
    """The checks of a flat ragged plate's offsets are the in-memory reader's: no traceback
    from reading past the file, and no tokens dropped before a first offset above 0."""
    path = tmp_path / "tokens.npz"
    np.savez(path, w=np.array([0, 2, 1, 3, 0, 1, 2, 2]), tokens_ptr=np.array(ptr))
    with pytest.raises(CemDataError, match=message):
        cemodel.data.load_data(path, lda.module.SPEC)
    with pytest.raises(CemDataError, match=message):
        lda.stream(path)


def test_nan_in_streamed_categories_is_missing_as_in_memory(tmp_path, dice):
    x = np.random.default_rng(0).integers(0, 6, 200).astype(float)
    x[37] = np.nan
    np.save(tmp_path / "nan.npy", x)
    options = {**SVI, "start": "prior"}
    memory = dice.fit({"x": x}, "svi", **options)
    streamed = dice.fit(dice.stream(tmp_path / "nan.npy"), "svi", **options)
    same_fit(memory, streamed, ["p.alpha"])


def test_flat_ids_with_weights_stream_as_their_count_matrix(tmp_path, lda, corpus):
    """A bag of words stored as CSR parts by name (w, tokens_ptr, tokens_weight): the counts
    are read with the ids, streamed as in memory."""
    path = tmp_path / "csr_parts.npz"
    np.savez(path, w=corpus.indices, tokens_ptr=corpus.indptr, tokens_weight=corpus.data)
    memory = lda.fit({"w": corpus}, "svi", dims={"K": 3}, **SVI)
    streamed = lda.fit(lda.stream(path), "svi", dims={"K": 3}, **SVI)
    same_fit(memory, streamed, ["beta.alpha"])
