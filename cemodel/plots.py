"""Figures and reports: plate diagrams (``cemodel graph``) and posteriors (``cemodel plot``,
``cemodel summarize``).

matplotlib is optional (the ``plot`` extra): it is imported when a figure is drawn, and a
missing install is a user error naming the extra. Figures are built on
``matplotlib.figure.Figure`` without pyplot, so nothing global changes.

Posterior files are read and recognised (topics, weights, clusters) by
``cemodel.posterior_files``, which ``cemodel summarize`` uses without matplotlib.
"""

from __future__ import annotations

import io
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
from .posterior_files import (
    Clusters,
    Posterior,
    Topics,
    Weights,
    check_vocab,
    recognise,
    top_words,
)

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
# cemodel plot
# ---------------------------------------------------------------------------


def plot_posterior(post: Posterior, fmt: str, vocab: list[str] | None = None, top: int = 10,
                   points: np.ndarray | None = None) -> bytes:
    """The ELBO trace and every recognised summary, as ``fmt`` bytes."""
    check_vocab(post, vocab)
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
