"""Figures and reports: plate diagrams (``cemodel graph``) and posteriors (``cemodel plot``,
``cemodel summarize``).

matplotlib is optional (the ``plot`` extra): it is imported when a figure is drawn, and a
missing install is a user error naming the extra. Figures are built on
``matplotlib.figure.Figure`` without pyplot, so nothing global changes.

A posterior is the ``.npz`` written by ``cemodel fit``: ``elbo`` (the trace) and, per
variable, its parameters ``NAME.PARAM`` and expectations ``E(STAT NAME)``. The family of
each variable comes from ``--model`` when given, else from its parameter names.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CemError
from .graph_layout import (
    CAPTION,
    DOT,
    FAMILY_FONT,
    HYPER_FONT,
    PLATE_FONT,
    Layout,
    caption,
    greek_letter,
    hyper_text,
    label_points,
)
from .model import Model
from .results import POSTERIOR_HINT, check_numbers, check_params, read_npz
from .saved import file_blocks, posterior_arrays

FORMATS = ("png", "svg", "pdf")


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise CemError("drawing a figure needs matplotlib, which is not installed",
                       hint="pip install 'cemodel[plot]' (cemodel graph can write .dot "
                       "without it)") from None
    return Figure


def _save(fig: Any, fmt: str) -> bytes:
    """The figure's bytes, without dates or random ids (the same input gives the same file)."""
    import matplotlib

    buffer = io.BytesIO()
    metadata = {"png": {"Software": "cemodel"}, "svg": {"Date": None},
                "pdf": {"CreationDate": None, "ModDate": None}}[fmt]
    with matplotlib.rc_context({"svg.hashsalt": "cemodel", "pdf.compression": 6}):
        fig.savefig(buffer, format=fmt, metadata=metadata, dpi=150)
    return buffer.getvalue()


# ---------------------------------------------------------------------------
# Plate diagrams
# ---------------------------------------------------------------------------


def math_label(name: str, indices: tuple[str, ...] = ()) -> str:
    """mathtext for a variable: ``theta`` + (d,) -> ``$\\theta_{d}$``; ``tau_b`` + (g,) ->
    ``$\\tau_{\\mathrm{b},g}$`` (a label upright, indices italic)."""
    def escape(text: str) -> str:
        return text.replace("_", "\\_")

    subs = [escape(i) for i in indices]
    head, _, suffix = name.partition("_")
    if greek_letter(name):
        base = "\\" + name
    elif greek_letter(head) and suffix:
        base = "\\" + head
        subs.insert(0, "\\mathrm{" + escape(suffix) + "}")
    elif len(name) == 1:
        base = name
    else:
        base = "\\mathrm{" + escape(name) + "}"
    return f"${base}" + ("_{" + ",".join(subs) + "}" if subs else "") + "$"


def render_diagram(layout: Layout, fmt: str) -> bytes:
    """The plate diagram drawn with matplotlib, as ``fmt`` (png, svg or pdf) bytes."""
    figure = _figure_class()
    from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

    margin, title = 0.2, 0.32
    b = layout.bounds
    x0, y0, x1, y1 = b.x0 - margin, b.y0 - margin - title, b.x1 + margin, b.y1 + margin
    fig = figure(figsize=(x1 - x0, y1 - y0))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(x0, x1)
    ax.set_ylim(y1, y0)  # y grows downwards, as in the layout
    ax.set_aspect("equal")
    ax.axis("off")
    ax.text(x0 + margin, y0 + margin * 0.6, f"model {layout.diagram.name}", fontsize=9,
            ha="left", va="top", color="#444444")

    for placed in layout.plates:
        box = placed.box
        ax.add_patch(FancyBboxPatch(
            (box.x0, box.y0), box.x1 - box.x0, box.y1 - box.y0,
            boxstyle="round,pad=0,rounding_size=0.1", fill=False, edgecolor="#555555",
            linewidth=1.0, zorder=1))
        ax.text(box.x1 - 0.08, box.y1 - 0.06, placed.plate.label, fontsize=PLATE_FONT,
                ha="right", va="bottom", color="#333333", zorder=2)

    for route in layout.routes:
        a, b2 = layout.ends(route.edge)
        ax.add_patch(FancyArrowPatch(
            (a.x, a.y), (b2.x, b2.y), arrowstyle="-|>", mutation_scale=10,
            connectionstyle=f"arc3,rad={route.bend}", shrinkA=a.radius * 72 + 1.5,
            shrinkB=b2.radius * 72 + 1.5, linewidth=1.0,
            linestyle=(0, (4, 2.5)) if route.edge.gate else "-",
            color="#1f4e79" if route.edge.gate else "black", zorder=3))

    for placed in layout.nodes:
        node = placed.node
        if node.kind == "hyper":
            ax.add_patch(Circle((placed.x, placed.y), DOT, color="black", zorder=4))
            ax.text(placed.x - DOT - 0.05, placed.y, hyper_text(node.name),
                    fontsize=HYPER_FONT, ha="right", va="center", zorder=4)
            continue
        r = placed.radius
        face = "white" if node.kind == "latent" else "#c8c8c8"
        if node.kind == "data":
            ax.add_patch(FancyBboxPatch(
                (placed.x - r * 0.9, placed.y - r * 0.9), 1.8 * r, 1.8 * r,
                boxstyle="round,pad=0,rounding_size=0.05", facecolor=face,
                edgecolor="black", linewidth=1.2, zorder=4))
        else:  # dashed: integrated out by KLC-CG
            ax.add_patch(Circle((placed.x, placed.y), r, facecolor=face, edgecolor="black",
                                linewidth=1.2, zorder=4,
                                linestyle=(0, (3, 2)) if node.collapsed else "-"))
        ax.text(placed.x, placed.y, math_label(node.name, node.indices),
                fontsize=label_points(node), ha="center", va="center", zorder=5)
        ax.text(placed.x, placed.y + r + CAPTION * 0.2, caption(node), fontsize=FAMILY_FONT,
                ha="center", va="top", color="#555555", zorder=5,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.85})
    return _save(fig, fmt)


# ---------------------------------------------------------------------------
# Posteriors: reading and recognising
# ---------------------------------------------------------------------------

# parameter names of each family in a posterior (``NAME.PARAM``), as the generated code writes
_FAMILY_PARAMS = {
    ("alpha",): "Dirichlet",
    ("probs",): "Categorical",
    ("a", "b"): "Beta",
    ("rate", "shape"): "Gamma",
    ("mean", "precision"): "Normal",  # MultivariateNormal when the precision is a matrix
    ("dof", "scale"): "Wishart",
    ("p",): "Bernoulli",
    # a joint block (cemodel.blocks) and its mean member's marginal mean
    ("beta", "mean", "rate", "shape"): "Normal-Gamma",
    ("beta", "dof", "mean", "scale"): "Normal-Wishart",
    ("mean",): "Normal",  # MultivariateNormal when a Normal-Wishart block's mean has its shape
}


# each family's parameter that gives the plate shape, and its number of event axes
_MAIN_PARAM = {"Dirichlet": ("alpha", 1), "Categorical": ("probs", 1), "Beta": ("a", 0),
               "Gamma": ("shape", 0), "Normal": ("mean", 0), "MultivariateNormal": ("mean", 1),
               "Wishart": ("scale", 2), "Bernoulli": ("p", 0), "Normal-Gamma": ("mean", 0),
               "Normal-Wishart": ("mean", 1)}


@dataclass(frozen=True)
class Variable:
    """One variable of a posterior: its family, whether it is local, and its arrays."""

    name: str
    family: str
    local: bool | None  # None: unknown (no model given)
    params: tuple[tuple[str, np.ndarray], ...]

    def param(self, name: str) -> np.ndarray:
        return dict(self.params)[name]

    @property
    def shape(self) -> tuple[int, ...]:
        """The plate shape: the leading axes of the family's main parameter."""
        param, event = _MAIN_PARAM.get(self.family, (self.params[0][0], 0))
        array = self.param(param)
        return array.shape[:array.ndim - event]

    @property
    def event(self) -> tuple[int, ...]:
        """The shape of one draw (a Dirichlet's categories, an MVN's dimension)."""
        param, event = _MAIN_PARAM.get(self.family, (self.params[0][0], 0))
        array = self.param(param)
        return array.shape[array.ndim - event:]

    def mean(self) -> np.ndarray:
        """The posterior mean (E[value])."""
        p = dict(self.params)
        if self.family == "Dirichlet":
            return p["alpha"] / p["alpha"].sum(axis=-1, keepdims=True)
        if self.family == "Beta":
            return p["a"] / (p["a"] + p["b"])
        if self.family == "Gamma":
            return p["shape"] / p["rate"]
        if self.family == "Wishart":
            return p["dof"][..., None, None] * p["scale"]
        return p.get("mean", p.get("probs", p.get("p")))


@dataclass(frozen=True)
class Posterior:
    path: str
    elbo: np.ndarray
    arrays: tuple[tuple[str, np.ndarray], ...]  # every array, in file order
    variables: tuple[Variable, ...]
    model: Model | None
    # joint blocks the file records: (block, mean member, precision member)
    blocks: tuple[tuple[str, str, str], ...] = ()

    def variable(self, name: str) -> Variable:
        for var in self.variables:
            if var.name == name:
                return var
        raise KeyError(name)


def load_posterior(path: str | Path, model: Model | None = None) -> Posterior:
    """Read a posterior .npz or .nc written by ``cemodel fit``; ``model`` names the families."""
    path = Path(path)
    source = model.source if model is not None else None
    stored = posterior_arrays(path, POSTERIOR_HINT, source)
    arrays = tuple((k, v) for k, v in stored.items()
                   if ":" not in k)  # not a saved fit's state:*, hyper:*, cemodel:meta
    for key, value in arrays:
        check_numbers(path, key, value)
    if "elbo" not in dict(arrays):
        raise CemError(f"{path} is not a posterior written by cemodel fit: it has no 'elbo' "
                       "array", hint=POSTERIOR_HINT)
    groups: dict[str, dict[str, np.ndarray]] = {}
    for key, value in arrays:  # NAME.PARAM; expectations E(STAT NAME) are listed only
        if re.fullmatch(r"[A-Za-z_]\w*\.\w+", key):
            name, _, param = key.partition(".")
            groups.setdefault(name, {})[param] = value
    variables = tuple(_variable(path, name, params, model, groups)
                      for name, params in groups.items())
    for var in variables:
        check_params(path, var.name, var.family, dict(var.params))
    elbo = dict(arrays)["elbo"]
    if elbo.ndim != 1 or elbo.size == 0:
        raise CemError(f"{path}: 'elbo' should be a non-empty trace, found shape {elbo.shape}")
    return Posterior(str(path), elbo.astype(float), arrays, variables, model,
                     file_blocks(path, stored))


def _variable(path: Path, name: str, params: dict[str, np.ndarray],
              model: Model | None, groups: dict[str, dict[str, np.ndarray]]) -> Variable:
    ordered = tuple(sorted(params.items()))
    if model is not None:
        names = [v.name for v in model.latents]
        members = {m.name: m for b in model.blocks for m in (b.mean, b.precision)}
        if name in members:  # a block member's marginal (q(Λ) exactly, E[μ])
            member = members[name]
            return Variable(name, model.family(member).name, model.is_local(member), ordered)
        if name not in names:
            raise CemError(f"{path} holds variable '{name}', which model '{model.name}' has "
                           "not as a latent variable", hint="is --model the model that was "
                           f"fitted? its latents are: {', '.join(names)}")
        var = model.var(name)
        return Variable(name, model.family(var).name, model.is_local(var), ordered)
    family = _FAMILY_PARAMS.get(tuple(sorted(params)), "unknown")
    if family == "Normal" and "precision" in params and \
            params["precision"].ndim > params["mean"].ndim:
        family = "MultivariateNormal"
    if family == "Normal" and "precision" not in params and any(
            _FAMILY_PARAMS.get(tuple(sorted(g))) == "Normal-Wishart"
            and g["mean"].shape == params["mean"].shape for g in groups.values()):
        family = "MultivariateNormal"
    return Variable(name, family, True if family == "Categorical" else None, ordered)


@dataclass(frozen=True)
class Topics:
    """A global Dirichlet per component over a vocabulary: a topic model's topics."""

    var: Variable
    words: np.ndarray  # K × V posterior mean


@dataclass(frozen=True)
class Weights:
    """A global Dirichlet of rank 1: mixture weights."""

    var: Variable
    weights: np.ndarray


@dataclass(frozen=True)
class Clusters:
    """2-D Gaussian components: means and, with a Wishart precision, covariances."""

    means_var: Variable
    means: np.ndarray  # K × 2
    covariances: np.ndarray | None  # K × 2 × 2, inv(E[precision])
    precision_var: Variable | None


def recognise(post: Posterior, vocab: list[str] | None = None
              ) -> tuple[list[Topics], list[Weights], list[Clusters]]:
    """The summaries that apply: topics, mixture weights, 2-D clusters."""
    dirichlets = [v for v in post.variables if v.family == "Dirichlet" and v.local is not True]
    weights = [Weights(v, v.mean()) for v in dirichlets if v.param("alpha").ndim == 1]
    tables = [v for v in dirichlets if v.param("alpha").ndim == 2]
    if post.model is None:
        # without the model, a table whose rows are another table's categories holds
        # per-item proportions over those rows (LDA's theta over beta's topics)
        tables = [v for v in tables if not any(
            o is not v and o.param("alpha").shape[0] == v.param("alpha").shape[1]
            and o.param("alpha").shape[1] != v.param("alpha").shape[0] for o in tables)]
    if vocab is not None:
        tables = [v for v in tables if v.param("alpha").shape[1] == len(vocab)]
    topics = [Topics(v, v.mean()) for v in tables]

    clusters: list[Clusters] = []
    wisharts = [v for v in post.variables if v.family == "Wishart" and v.local is not True]
    for v in post.variables:
        if v.family != "MultivariateNormal" or v.local is True:
            continue
        mean = v.param("mean")
        if mean.ndim != 2 or mean.shape[1] != 2:
            continue
        match = next((w for w in wisharts if w.param("scale").shape == (mean.shape[0], 2, 2)),
                     None)
        cov = np.linalg.inv(match.mean()) if match is not None else None
        clusters.append(Clusters(v, mean, cov, match))
    return topics, weights, clusters


def read_vocab(path: str | Path) -> list[str]:
    """One word per line (UCI ``vocab.*.txt``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CemError(f"no such vocabulary file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CemError(f"cannot read vocabulary file {path}: {exc}") from None
    words = [line.strip() for line in text.splitlines()]
    while words and not words[-1]:
        words.pop()
    if not words:
        raise CemError(f"vocabulary file {path} is empty", hint="give one word per line")
    return words


def _check_vocab(post: Posterior, vocab: list[str] | None) -> None:
    if vocab is None:
        return
    sizes = sorted({v.param("alpha").shape[1] for v in post.variables
                    if v.family == "Dirichlet" and v.param("alpha").ndim == 2})
    if len(vocab) not in sizes:
        raise CemError(f"--vocab has {len(vocab)} words, but no topic table of the posterior "
                       "is over that many", hint="its Dirichlet tables have "
                       + (", ".join(str(s) for s in sizes) or "none") + " categories")


def top_words(topics: Topics, top: int, vocab: list[str] | None) -> list[list[tuple[str, float]]]:
    rows = []
    for row in topics.words:
        order = np.argsort(-row, kind="stable")[:top]
        rows.append([(vocab[i] if vocab else f"#{i}", float(row[i])) for i in order])
    return rows


# ---------------------------------------------------------------------------
# cemodel summarize
# ---------------------------------------------------------------------------


def _trace_text(elbo: np.ndarray) -> list[str]:
    n = elbo.size
    lines = [f"ELBO: final {elbo[-1]:.6e} after {n} iteration{'s' if n != 1 else ''} "
             "(epochs for stochastic fits)"]
    if n > 1:
        drops = np.diff(elbo)
        lines.append(f"  first {elbo[0]:.6e}, last change {drops[-1]:+.3e}")
        if (drops < -1e-9 * np.abs(elbo[1:])).any():
            i = int(np.argmin(drops))
            lines.append(f"  not monotone: largest drop {drops[i]:.3e} at iteration {i + 2}")
        else:
            lines.append("  increased monotonically")
    return lines


def summarize(post: Posterior, vocab: list[str] | None = None, top: int = 10) -> str:
    """The text report of ``cemodel summarize``."""
    _check_vocab(post, vocab)
    head = f"posterior {post.path}"
    if post.model is not None:
        head += f" (model {post.model.name}, {post.model.source.filename})"
    lines = [head, *_trace_text(post.elbo), "", "arrays:"]
    width = max(len(k) for k, _ in post.arrays)
    lines.append(f"  {'name':<{width}}  {'shape':<14}{'min':>12}{'mean':>12}{'max':>12}")
    for key, value in post.arrays:
        shape = str(value.shape)
        if value.size and np.issubdtype(value.dtype, np.number):
            stats = "".join(f"{s:>12.4g}" for s in (value.min(), value.mean(), value.max()))
        else:
            stats = ""
        lines.append(f"  {key:<{width}}  {shape:<14}{stats}")
    lines += ["", "variables:"]
    width = max(len(v.name) for v in post.variables) if post.variables else 4
    lines.append(f"  {'name':<{width}}  {'family':<20}{'scope':<8}{'plates':<10}{'event':<8}"
                 "posterior mean (when small)")
    for var in post.variables:
        where = {True: "local", False: "global", None: "?"}[var.local]
        plates = " × ".join(str(s) for s in var.shape) or "-"
        event = " × ".join(str(s) for s in var.event) or "-"
        line = f"  {var.name:<{width}}  {var.family:<20}{where:<8}{plates:<10}{event:<8}"
        mean = var.mean() if var.family != "unknown" else None
        if mean is not None and 0 < mean.size <= 8:
            line += np.array2string(np.asarray(mean), precision=4, separator=", ",
                                    suppress_small=True).replace("\n", "")
        lines.append(line.rstrip())
    topics, weights, clusters = recognise(post, vocab)
    for t in topics:
        lines += ["", f"topics ({t.var.name}: posterior mean, top {top} words):"]
        for k, row in enumerate(top_words(t, top, vocab)):
            lines.append(f"  {k:3d}: " + "  ".join(f"{w} {p:.3f}" for w, p in row))
    for w in weights:
        order = np.argsort(-w.weights, kind="stable")
        lines += ["", f"weights ({w.var.name}: posterior mean, largest first):"]
        shown = order[:top]
        for k in shown:
            lines.append(f"  component {k:3d}: {w.weights[k]:.4f}")
        if order.size > shown.size:
            rest = w.weights[order[top:]].sum()
            lines.append(f"  {order.size - shown.size} more components: {rest:.4f} in all")
    for c in clusters:
        lines += ["", f"2-D components ({c.means_var.name}"
                  + (f", {c.precision_var.name}" if c.precision_var else "") + "):"]
        for k, m in enumerate(np.round(c.means, 12)):
            text = f"  {k:3d}: mean ({m[0]: .4g}, {m[1]: .4g})"
            if c.covariances is not None:
                s = c.covariances[k]
                text += (f"  sd ({np.sqrt(s[0, 0]):.4g}, {np.sqrt(s[1, 1]):.4g})"
                         f"  corr {s[0, 1] / np.sqrt(s[0, 0] * s[1, 1]): .3f}")
            lines.append(text)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# cemodel plot
# ---------------------------------------------------------------------------


def load_points(path: str | Path, post: Posterior) -> np.ndarray:
    """N × 2 points for the cluster panel: .npy, .csv, or the one N × 2 array of an .npz."""
    path = Path(path)
    try:
        if path.suffix == ".csv":
            points = np.loadtxt(path, delimiter=",", ndmin=2)
        elif path.suffix == ".npy":
            points = np.load(path, allow_pickle=False)
        else:
            arrays = read_npz(path, "data file")
            names = [k for k, v in arrays.items() if v.ndim == 2 and v.shape[1] == 2]
            if post.model is not None:
                names = [k for k in names if k in {v.name for v in post.model.observed}]
            if len(names) != 1:
                raise CemError(f"--data {path}: expected one N × 2 array, found "
                               f"{len(names)} ({', '.join(names) or 'none'})")
            points = arrays[names[0]]
    except FileNotFoundError:
        raise CemError(f"no such data file: {path}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CemError(f"cannot read data file {path}: {exc}") from None
    check_numbers(path, "the points", np.asarray(points))
    points = np.asarray(points, dtype=float)
    if points.ndim != 2 or points.shape[1] != 2:
        raise CemError(f"--data {path}: expected an N × 2 array of points, found shape "
                       f"{points.shape}")
    return points


def plot_posterior(post: Posterior, fmt: str, vocab: list[str] | None = None, top: int = 10,
                   points: np.ndarray | None = None) -> bytes:
    """The ELBO trace and every recognised summary, as ``fmt`` bytes."""
    _check_vocab(post, vocab)
    figure = _figure_class()
    topics, weights, clusters = recognise(post, vocab)
    # (kind, object, wide): wide panels take a whole row
    panels: list[tuple[str, Any, bool]] = [("elbo", None, False)]
    panels += [("clusters", c, False) for c in clusters]
    panels += [("weights", w, False) for w in weights]
    panels += [("topics", t, True) for t in topics]
    rows: list[list[tuple[str, Any, bool]]] = []
    for panel in panels:
        if not panel[2] and rows and len(rows[-1]) == 1 and not rows[-1][0][2]:
            rows[-1].append(panel)
        else:
            rows.append([panel])
    heights = [_topic_height(p[1]) if p[0] == "topics" else 3.6 for p, *_ in rows]
    width = 5.5 if len(panels) == 1 else 11.0 if any(len(row) == 2 for row in rows) else 8.0
    height = sum(heights)
    bottom = 0.2 if rows[-1][0][0] == "topics" else 0.55  # inches: room for axis labels
    fig = figure(figsize=(width, height))
    grid = fig.add_gridspec(len(rows), 2, height_ratios=heights, hspace=0.45, wspace=0.25,
                            left=0.9 / width, right=0.97, top=1 - 0.45 / height,
                            bottom=bottom / height)
    for i, row in enumerate(rows):
        for j, (kind, obj, _) in enumerate(row):
            ax = fig.add_subplot(grid[i, :] if len(row) == 1 else grid[i, j])
            if kind == "elbo":
                _plot_elbo(ax, post.elbo)
            elif kind == "weights":
                _plot_weights(ax, obj)
            elif kind == "clusters":
                _plot_clusters(ax, obj, weights, post, points)
            else:
                _plot_topics(ax, obj, top, vocab)
    return _save(fig, fmt)


def _topic_height(topics: Topics) -> float:
    return 0.35 + 0.15 * min(len(topics.words) + 1, 31)


def _plot_elbo(ax: Any, elbo: np.ndarray) -> None:
    x = np.arange(1, elbo.size + 1)
    ax.plot(x, elbo, marker="o" if elbo.size <= 40 else None, markersize=3, linewidth=1.2)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("ELBO")
    ax.set_title(f"ELBO: final {elbo[-1]:.5g} after {elbo.size} iterations", fontsize=10)
    ax.grid(alpha=0.3)


def _plot_weights(ax: Any, w: Weights) -> None:
    k = np.arange(w.weights.size)
    ax.bar(k, w.weights, color="#4c72b0")
    ax.set_xlabel("component")
    ax.set_ylabel(f"E[{w.var.name}]")
    ax.set_title(f"{w.var.name}: mixture weights (posterior mean)", fontsize=10)
    if w.weights.size <= 20:
        ax.set_xticks(k)
    ax.grid(alpha=0.3, axis="y")


def _plot_clusters(ax: Any, c: Clusters, weights: list[Weights], post: Posterior,
                   points: np.ndarray | None) -> None:
    from matplotlib.patches import Ellipse

    k = len(c.means)
    share = next((w.weights for w in weights if w.weights.size == k), None)
    colors = [f"C{i % 10}" for i in range(k)]
    if points is not None:
        probs = next((v.param("probs") for v in post.variables if v.family == "Categorical"
                      and v.param("probs").shape == (len(points), k)), None)
        if probs is not None:
            ax.scatter(points[:, 0], points[:, 1], s=6, alpha=0.5,
                       c=[colors[i] for i in probs.argmax(axis=1)], linewidths=0)
        else:
            ax.scatter(points[:, 0], points[:, 1], s=6, alpha=0.5, color="grey", linewidths=0)
    for i, m in enumerate(c.means):
        faint = share is not None and share[i] < 0.01
        alpha = 0.25 if faint else 1.0
        if c.covariances is not None:
            values, vectors = np.linalg.eigh(c.covariances[i])
            angle = float(np.degrees(np.arctan2(vectors[1, 1], vectors[0, 1])))
            ax.add_patch(Ellipse((m[0], m[1]), 4 * np.sqrt(values[1]), 4 * np.sqrt(values[0]),
                                 angle=angle, fill=False, edgecolor=colors[i], linewidth=1.5,
                                 alpha=alpha, linestyle="--" if faint else "-"))
        ax.plot(m[0], m[1], marker="x", color=colors[i], markersize=8, alpha=alpha,
                markeredgewidth=2)
        label = f"{i}" + (f" ({share[i]:.2f})" if share is not None else "")
        ax.annotate(label, (m[0], m[1]), textcoords="offset points", xytext=(5, 5),
                    fontsize=8, alpha=alpha)
    ax.autoscale_view()
    ax.set_aspect("equal", adjustable="box")
    what = "means and 2-sd ellipses of inv(E[precision])" if c.covariances is not None else "means"
    ax.set_title(f"{c.means_var.name}: component {what}", fontsize=10)
    ax.grid(alpha=0.3)


def _plot_topics(ax: Any, t: Topics, top: int, vocab: list[str] | None) -> None:
    ax.axis("off")
    rows = top_words(t, top, vocab)
    shown = rows[:30]
    lines = [f"{k:3d}  " + "  ".join(w for w, _ in row) for k, row in enumerate(shown)]
    if len(rows) > len(shown):
        lines.append(f"... and {len(rows) - len(shown)} more topics (cemodel summarize "
                     "lists them all)")
    ax.set_title(f"{t.var.name}: top {top} words per topic (posterior mean)", fontsize=10,
                 loc="left")
    ax.text(0.0, 1.0, "\n".join(lines), family="monospace", fontsize=8, va="top", ha="left",
            transform=ax.transAxes)
