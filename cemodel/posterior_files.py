"""Posterior files read for reports: ``cemodel summarize`` and the panels ``cemodel plot``
draws (``cemodel.plots``), without matplotlib.

A posterior is the ``.npz`` written by ``cemodel fit``: ``elbo`` (the trace) and, per
variable, its parameters ``NAME.PARAM`` and expectations ``E(STAT NAME)``. The family of
each variable comes from ``--model`` when given, else from its parameter names.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import CemError
from .model import Model, RVar, expr_vars
from .results import POSTERIOR_HINT, check_numbers, check_params, read_npz
from .saved import file_blocks, posterior_arrays

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


def _data_mean(model: Model | None, name: str) -> bool:
    """Is ``name`` the mean of observed points (not, say, a mixture's regression weights)?
    Without the model, any K × 2 MVN global is taken for one."""
    if model is None:
        return True
    for var in model.variables:
        mean = var.args[0] if var.observed and var.family == "MultivariateNormal" else None
        if isinstance(mean, RVar):  # a Normal-Wishart block's mean member: the block's
            block = model.block(mean.name)
            if name in (mean.name, block.mean.name if block else None):
                return True
    return False


def _read_by_data(model: Model, name: str) -> bool:
    """Is the table ``name`` the probabilities of observed categories or counts?"""
    return any(var.observed and var.family in ("Categorical", "Multinomial")
               and any(name == n for a in var.args for n, _ in expr_vars(a))
               for var in model.variables)


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
    else:  # topics are distributions over observed symbols (not an HMM's transition rows)
        tables = [v for v in tables if _read_by_data(post.model, v.name)]
    if vocab is not None:
        tables = [v for v in tables if v.param("alpha").shape[1] == len(vocab)]
    topics = [Topics(v, v.mean()) for v in tables]

    clusters: list[Clusters] = []
    wisharts = [v for v in post.variables if v.family == "Wishart" and v.local is not True]
    for v in post.variables:
        if v.family != "MultivariateNormal" or v.local is True:
            continue
        mean = v.param("mean")
        if mean.ndim != 2 or mean.shape[1] != 2 or not _data_mean(post.model, v.name):
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


def check_vocab(post: Posterior, vocab: list[str] | None) -> None:
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
    check_vocab(post, vocab)
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


def _refuse_unless(clustered: bool, path: Path) -> None:
    if not clustered:
        raise CemError(f"--data {path}: the points are drawn under a 2-D mixture's clusters "
                       "(a MultivariateNormal global of K × 2 means of the data), and this "
                       "posterior has none; leave out --data")


def load_points(path: str | Path, post: Posterior) -> np.ndarray:
    """N × 2 points for the cluster panel: .npy, .csv, or the one N × 2 array of an .npz."""
    path = Path(path)
    clustered = bool(recognise(post)[2])
    try:
        if path.suffix == ".csv":
            points = np.loadtxt(path, delimiter=",", ndmin=2)
        elif path.suffix == ".npy":
            points = np.load(path, allow_pickle=False)
        else:
            arrays = read_npz(path, "data file")
            _refuse_unless(clustered, path)
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
    _refuse_unless(clustered, path)
    check_numbers(path, "the points", np.asarray(points))
    points = np.asarray(points, dtype=float)
    if points.ndim != 2 or points.shape[1] != 2:
        raise CemError(f"--data {path}: expected an N × 2 array of points, found shape "
                       f"{points.shape}")
    return points
