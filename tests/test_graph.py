"""`cemodel graph`: plate diagrams of every stdlib model, as images and as DOT text."""

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("CEMODEL_CACHE", str(REPO / ".cemodel_cache" / "tests"))

import pytest  # noqa: E402

from cemodel.cli import main  # noqa: E402
from cemodel.compiler import read_source  # noqa: E402
from cemodel.graph import diagram, to_dot  # noqa: E402
from cemodel.graph_layout import layout_diagram  # noqa: E402
from cemodel.resolve import build_model  # noqa: E402
from cemodel.syntax import parse  # noqa: E402

MODELS = REPO / "stdlib_models"
STDLIB = sorted(MODELS.glob("*.cem"))
LDA = MODELS / "lda.cem"

# a model with covariates, one used as an index, and a hyperparameter shared by two variables
REGRESSION = """model groups
dim N
dim P
dim G = 3
hyper a0 = 1.0
w ~ MVN(zeros(P), eye(P))
tau ~ Gamma(a0, 1.0)
plate groups k in G:
    lam[k] ~ Gamma(a0, 1.0)
plate pts n in N:
    data x[n] : vector(P)
    data g[n] : int
    observe y[n] ~ Normal(dot(x[n], w), lam[g[n]] * tau)
"""


def _model(path: Path):
    text, filename = read_source(path)
    return build_model(parse(text, filename))


def _cluster_body(dot: str, name: str) -> str:
    """The text of ``subgraph cluster_<name> { ... }`` (braces balanced)."""
    start = dot.index(f"subgraph cluster_{name} {{")
    depth, i = 0, start
    while True:
        if dot[i] == "{":
            depth += 1
        elif dot[i] == "}":
            depth -= 1
            if depth == 0:
                return dot[start:i + 1]
        i += 1


@pytest.mark.parametrize("path", STDLIB, ids=[p.stem for p in STDLIB])
def test_every_stdlib_model_renders_a_png(path, tmp_path, capsys):
    import matplotlib.image

    out = tmp_path / f"{path.stem}.png"
    assert main(["graph", str(path), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary left
    assert out.stat().st_size > 10_000
    image = matplotlib.image.imread(out)
    assert image.shape[0] > 200 and image.shape[1] > 300
    assert image[..., :3].std() > 0.05  # not blank
    assert (image[..., :3] < 0.3).mean() > 0.005  # dark ink: outlines, text, arrows


@pytest.mark.parametrize("path", STDLIB, ids=[p.stem for p in STDLIB])
def test_layout_boxes_hold_exactly_their_members(path):
    """Each plate's box holds its variables (and nested plates' boxes) and no other node."""
    layout = layout_diagram(diagram(_model(path)))
    boxes = {p.plate.name: p.box for p in layout.plates}
    for placed in layout.nodes:
        for name, box in boxes.items():
            inside = box.x0 < placed.x < box.x1 and box.y0 < placed.y < box.y1
            assert inside == (name in placed.node.plates), (placed.node.name, name)
    for placed in layout.plates:
        parent = placed.plate.parent
        if parent is not None:
            outer, inner = boxes[parent], placed.box
            assert outer.x0 < inner.x0 and inner.x1 < outer.x1
            assert outer.y0 < inner.y0 and inner.y1 < outer.y1
    # plates that are not nested do not overlap; nodes do not overlap
    names = list(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            nested = {a, b} & {p.plate.name for p in layout.plates
                               if p.plate.parent in (a, b)} or a in _ancestors(layout, b) \
                or b in _ancestors(layout, a)
            if not nested:
                assert not boxes[a].overlaps(boxes[b]), (a, b)
    for i, p in enumerate(layout.nodes):
        for q in layout.nodes[i + 1:]:
            assert not p.box.overlaps(q.box), (p.node.name, q.node.name)


def _ancestors(layout, name):
    parents = {p.plate.name: p.plate.parent for p in layout.plates}
    found = []
    while parents.get(name):
        name = parents[name]
        found.append(name)
    return found


def test_lda_png_and_dot(tmp_path, capsys):
    png, dot_path = tmp_path / "lda.png", tmp_path / "lda.dot"
    assert main(["graph", str(LDA), "-o", str(png)]) == 0
    assert main(["graph", str(LDA), "-o", str(dot_path)]) == 0
    capsys.readouterr()
    assert png.stat().st_size > 20_000
    dot = dot_path.read_text(encoding="utf-8")
    assert dot.startswith("// plate diagram of model lda")
    for cluster in ("topics", "docs", "tokens"):
        assert f"subgraph cluster_{cluster} {{" in dot
    docs = _cluster_body(dot, "docs")
    assert "subgraph cluster_tokens {" in docs  # tokens nested inside docs
    assert "subgraph cluster_tokens" not in _cluster_body(dot, "topics")
    tokens = _cluster_body(dot, "tokens")
    assert re.search(r"^\s*z \[", tokens, re.M) and re.search(r"^\s*w \[", tokens, re.M)
    assert re.search(r"^\s*theta \[", docs, re.M)
    assert re.search(r"^\s*beta \[", _cluster_body(dot, "topics"), re.M)
    assert 'label="tokens n ∈ N[d]"' in tokens
    assert 'label="docs d ∈ D"' in docs
    assert 'label="topics k ∈ K=20"' in dot
    assert "theta -> z;" in dot
    assert "beta -> w;" in dot
    assert "z -> w [style=dashed];" in dot  # the gate
    assert "alpha -> theta;" in dot and "eta -> beta;" in dot
    assert re.search(r"w \[[^\]]*fillcolor=gray80", dot)  # observed: shaded


def test_klc_collapse_set_is_drawn_dashed(tmp_path, capsys):
    """LDA: topics and proportions are integrated out by KLC-CG (dashed), z is not; a
    --collapse that is not valid is refused with the reason."""
    dot_path = tmp_path / "lda.dot"
    assert main(["graph", str(LDA), "-o", str(dot_path)]) == 0
    dot = dot_path.read_text(encoding="utf-8")
    for name in ("beta", "theta"):
        assert re.search(rf"^\s*{name} \[shape=circle, style=dashed", dot, re.M)
    assert not re.search(r"^\s*z \[[^\]]*style=dashed", dot, re.M)
    gmm = LDA.parent / "gmm.cem"  # no valid collapse set: nothing dashed
    assert main(["graph", str(gmm), "-o", str(dot_path)]) == 0
    assert "shape=circle, style=dashed" not in dot_path.read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["graph", str(LDA), "-o", str(dot_path), "--collapse", "beta"]) == 2
    assert "'theta' (a local Dirichlet) would be parameterised" in capsys.readouterr().err


def test_dot_is_deterministic_and_follows_set(tmp_path, capsys):
    a, b = tmp_path / "a.dot", tmp_path / "b.dot"
    assert main(["graph", str(LDA), "-o", str(a), "--set", "K=50"]) == 0
    assert main(["graph", str(LDA), "-o", str(b), "--set", "K=50"]) == 0
    capsys.readouterr()
    assert a.read_bytes() == b.read_bytes()
    assert 'label="topics k ∈ K=50"' in a.read_text(encoding="utf-8")


def test_no_hypers(tmp_path, capsys):
    out = tmp_path / "lda.dot"
    assert main(["graph", str(LDA), "-o", str(out), "--no-hypers"]) == 0
    capsys.readouterr()
    dot = out.read_text(encoding="utf-8")
    assert not re.search(r"\b(alpha|eta)\b", dot)
    assert "theta -> z;" in dot


def test_covariates_gates_by_data_and_shared_hypers(tmp_path):
    d = diagram(build_model(parse(REGRESSION, "groups.cem")))
    kinds = {n.name: n.kind for n in d.nodes}
    assert kinds == {"a0": "hyper", "x": "data", "g": "data", "w": "latent", "tau": "latent",
                     "lam": "latent", "y": "observed"}
    edges = {(e.source, e.target): e for e in d.edges}
    assert edges[("g", "y")].gate and edges[("g", "y")].selects == ("lam",)
    assert edges[("x", "y")].roles == ("mean",)
    assert ("a0", "tau") in edges and ("a0", "lam") in edges
    layout = layout_diagram(d)
    # a shared hyperparameter is drawn beside each variable it feeds
    copies = [p for p in layout.nodes if p.node.name == "a0"]
    assert sorted(p.target for p in copies) == ["lam", "tau"]
    for p in copies:
        assert layout.at("a0", p.target) is p
    dot = to_dot(d)
    assert "g -> y [style=dashed];" in dot
    assert re.search(r"x \[shape=box", dot)
    out = tmp_path / "groups.cem"
    out.write_text(REGRESSION)
    png = tmp_path / "groups.svg"
    assert main(["graph", str(out), "-o", str(png)]) == 0
    assert png.read_text().lstrip().startswith("<?xml")


def test_svg_and_pdf_are_deterministic(tmp_path, capsys):
    for suffix in ("svg", "pdf"):
        a, b = tmp_path / f"a.{suffix}", tmp_path / f"b.{suffix}"
        assert main(["graph", str(LDA), "-o", str(a)]) == 0
        assert main(["graph", str(LDA), "-o", str(b)]) == 0
        assert a.read_bytes() == b.read_bytes()
        assert a.stat().st_size > 5_000
    assert (tmp_path / "a.pdf").read_bytes().startswith(b"%PDF")
    capsys.readouterr()


@pytest.mark.parametrize("name", ["lda.txt", "lda.jpeg", "lda"])
def test_bad_output_extension_exits_2(tmp_path, capsys, name):
    out = tmp_path / name
    status = main(["graph", str(LDA), "-o", str(out)])
    err = capsys.readouterr().err
    assert status == 2
    assert "cemodel graph writes .png, .svg, .pdf or .dot" in err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_source_error_and_missing_file_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.cem"
    bad.write_text("model m\ndim N\np ~ Beta(1, 1)\nplate t n in N:\n"
                   "    observe x[n] ~ Bernouli(p)\n")
    assert main(["graph", str(bad), "-o", str(tmp_path / "bad.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bad.cem:5:20: error: unknown distribution 'Bernouli'")
    assert main(["graph", str(tmp_path / "nope.cem"), "-o", str(tmp_path / "x.dot")]) == 2
    assert "no such model file" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.cem"]


def test_a_non_conjugate_model_can_still_be_drawn(tmp_path, capsys):
    model = tmp_path / "nc.cem"
    model.write_text("model nc\ndim N\nmu ~ Gamma(1.0, 1.0)\nplate t n in N:\n"
                     "    observe y[n] ~ Normal(mu, 1.0)\n")
    assert main(["check", str(model)]) == 2
    capsys.readouterr()
    assert main(["graph", str(model), "-o", str(tmp_path / "nc.dot")]) == 0
    assert "mu -> y;" in (tmp_path / "nc.dot").read_text(encoding="utf-8")


def test_default_output_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["graph", str(MODELS / "beta_bernoulli.cem")]) == 0
    assert "wrote beta_bernoulli_graph.png" in capsys.readouterr().out
    assert (tmp_path / "beta_bernoulli_graph.png").is_file()


def test_missing_matplotlib_is_a_user_error(tmp_path, monkeypatch, capsys):
    import sys

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    out = tmp_path / "lda.png"
    assert main(["graph", str(LDA), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "needs matplotlib" in err and "cemodel[plot]" in err
    assert not out.exists()
    # .dot needs nothing
    assert main(["graph", str(LDA), "-o", str(tmp_path / "lda.dot")]) == 0


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit) as info:
        main(["graph", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "cemodel graph stdlib_models/lda.cem -o lda.png" in out


def test_math_labels():
    from cemodel.plots import math_label

    assert math_label("theta", ("d",)) == "$\\theta_{d}$"
    assert math_label("z", ("d", "n")) == "$z_{d,n}$"
    assert math_label("tau_b") == "$\\tau_{\\mathrm{b}}$"
    assert math_label("tau_w", ("g",)) == "$\\tau_{\\mathrm{w},g}$"
    assert math_label("rate", ("k",)) == "$\\mathrm{rate}_{k}$"
    assert math_label("my_var") == "$\\mathrm{my\\_var}$"


def test_hyperparameters_and_covariates_inside_a_sum_are_drawn():
    text = """model exposures
dim K = 3
dim N
hyper c = 2.0
plate comps k in K:
    lam[k] ~ Gamma(1.0, 1.0)
plate items n in N:
    data x[n] : real
    observe y[n] ~ Poisson(sum(c * x[n] * lam[k] for k in K))
"""
    d = diagram(build_model(parse(text, "exposures.cem")))
    kinds = {n.name: n.kind for n in d.nodes}
    assert kinds["c"] == "hyper" and kinds["x"] == "data"
    edges = {(e.source, e.target) for e in d.edges}
    assert {("c", "y"), ("x", "y"), ("lam", "y")} <= edges
