"""The Python API: a compiled model, its fits, and a scikit-learn estimator.

    model = cemodel.Model("stdlib_models/lda.cem", K=50)    # or Model("lda", K=50)
    fit = model.fit({"w": X}, method="svi", local="mf", batch_size=256, epochs=5)
    fit["beta.alpha"], fit.expectation("E[log beta]"), fit.mean("beta")
    fit.elbo, fit.seconds, fit.hypers, fit.state             # a FitResult, plus method/local
    new = model.infer({"w": X_new}, fit)   # locals of new data with the globals held fixed
    new.mean("theta"), new.elbo             # their posterior and the data's ELBO term

    est = CemEstimator(model="lda", K=20).fit(X)            # scikit-learn conventions
    est.transform(X_new)   # document-topic proportions (mixtures: responsibilities q(z))
    est.score(X_new)       # topic models: -log perplexity (document completion); else ELBO/item

Everything runs the generated module (``Model.module``, ``cemodel.compile``); nothing here
changes how a model is fitted. A model is compiled once per (file contents, settings) in a
process, and its kernels once per machine (the compiler's disk cache).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .compiler import Stages, compile_stages, read_source, run_stages
from .errors import CemError, CemInternalError
from .fits import Fit, Inference
from .options import check_options, setting_number
from .runtime.driver import FitResult, check_applies
from .runtime.drivers import DRIVERS
from .runtime.drivers.interface import zero_statistics
from .runtime.source import ItemSource
from .topics import TopicStructure, topic_structure

if TYPE_CHECKING:
    from .chains import Smoothed
    from .scoring import Score

__all__ = ["CemEstimator", "Fit", "Inference", "Model", "TopicStructure", "load_result",
           "topic_structure"]

STDLIB = Path(__file__).resolve().parents[1] / "stdlib_models"

_COMPILED: dict[tuple, tuple[Stages, ModuleType]] = {}
_COMPILING = threading.Lock()


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------


def resolve_model_path(model: str | Path) -> Path:
    """A model file; a bare name (``"lda"``) or ``stdlib_models/NAME.cem`` that is not a file
    here is looked up in cemodel's model library."""
    path = Path(model)
    if not path.exists() and path.parent in (Path("."), Path("stdlib_models")):
        candidate = STDLIB / (path.name if path.suffix == ".cem" else f"{path.name}.cem")
        if candidate.is_file():
            return candidate
    return path


def _compiled(path: Path, settings: dict[str, float],
              collapse: tuple[str, ...] | None = None) -> tuple[Stages, ModuleType]:
    text, filename = read_source(path)
    key = (str(path.resolve()), hashlib.sha256(text.encode()).hexdigest(),
           tuple(sorted(settings.items())), collapse)
    with _COMPILING:
        if key not in _COMPILED:
            stages = run_stages(text, filename, settings, collapse)
            _COMPILED[key] = (stages, compile_stages(stages))
        return _COMPILED[key]


class Model:
    """A compiled model: ``Model("lda.cem", K=50)``, the settings as ``--set`` takes them.

    ``module`` is the generated module (``fit``, ``fit_svi``, ...); ``methods`` and
    ``local_steps`` say which inference methods apply and why the others do not (as
    ``cemodel check``)."""

    def __init__(self, path: str | Path, *, collapse: Sequence[str] | None = None,
                 **settings: float) -> None:
        self.path = resolve_model_path(path)
        self.settings = {name: setting_number(name, value) for name, value in settings.items()}
        self.collapse = None if collapse is None else tuple(collapse)
        self.stages, self.module = _compiled(self.path, self.settings, self.collapse)

    # the compiled model is immutable: copies share it, pickles recompile (from the disk cache)
    def __deepcopy__(self, memo: dict) -> Model:
        return self

    def __reduce__(self) -> tuple:
        return _model, (str(self.path), self.settings, self.collapse)

    def __repr__(self) -> str:
        settings = "".join(f", {k}={v:g}" for k, v in self.settings.items())
        return f"Model({str(self.path)!r}{settings})"

    @property
    def name(self) -> str:
        return self.stages.model.name

    @property
    def methods(self) -> dict[str, str]:
        """Global steps: method -> "yes" or "no: the reason"."""
        return dict(self.stages.plan.methods)

    @property
    def local_steps(self) -> dict[str, str]:
        """Local steps (E-steps): name -> "yes: ..." or "no: the reason"."""
        return dict(getattr(self.module, "LOCAL_STEPS", None) or self.stages.plan.local_steps)

    @property
    def learnable(self) -> tuple[str, ...]:
        return tuple(getattr(self.module, "LEARNABLE", ()))

    @property
    def inputs(self) -> tuple[str, ...]:
        """The names ``fit`` takes data for: observed variables, then covariates."""
        spec = self.module.SPEC
        return tuple(spec["observed"]) + tuple(spec.get("covariates", {}))

    @property
    def data_plate(self) -> str | None:
        return self.stages.model.data_plate

    @property
    def item_locals(self) -> tuple[str, ...]:
        """Locals with one posterior per item of the data plate (LDA: theta; GMM: z), as the
        model file declares them: not a variable cemodel introduced (a Pólya-Gamma ω,
        Student-t's precision scale), which is part of the method, not of the model."""
        from .predictive import declared_kept

        return declared_kept(self.stages.plan)

    def stream(self, path: str | Path) -> ItemSource:
        """The data file ``path`` read out of core: ``fit(model.stream(path), method="svi")``
        reads one minibatch at a time (.npy, .npz, .mtx, UCI docword; see
        ``cemodel.streaming``), for the SVI methods. Refused with the reason where the model
        cannot read its items a minibatch at a time."""
        from .streaming import open_model_source

        return open_model_source(self.module, self.data_plate, path)

    def check(self) -> str:
        """The ``cemodel check`` report."""
        from .check import check_report

        return check_report(self.stages.plan)

    def fit(self, data: Mapping[str, Any], method: str = "mf", *, local: str = "mf",
            **options: Any) -> Fit:
        """Fit by ``method`` (mf, svi, svi+, ssvi-a, ssvi, klc) with the E-step ``local`` (mf,
        exact, gibbs, cvb0; klc has none); ``options`` go to the generated function
        (``max_iter``, ``epochs``, ``batch_size``, ``hypers``, ``dims``, ``learn``, ``seed``,
        ``init``, ``cg``, ...). A method or local step that does not apply is refused with the
        reason."""
        method = check_applies("method", method, self.methods)
        if method == "klc" and local != "mf":
            raise CemError(f"local step {local!r}: KLC-CG has no local step (it optimises "
                           "q(Z) directly)")
        if self.data_plate is not None and method != "klc":
            options["local"] = check_applies("local step", local, self.local_steps)
        elif local != "mf":
            raise CemError(f"local step {local!r} does not apply to this model: it has no data "
                           "plate, so no local variables")
        result = DRIVERS[method].run(self.module, data, **options)
        return Fit.of(result, method, local, self, options.get("seed", 0))

    def _check_fit(self, fit: FitResult, what: str) -> None:
        """A fit of another model is refused naming both (it surfaced as "unknown
        hyperparameter 'a'"). Sizes are the fit's own (``fit(dims={"K": 3})`` on a model
        whose file says K = 20): they are read from it, not compared."""
        if not isinstance(fit, FitResult):  # e.g. score's arguments in infer's order
            raise CemError(f"{what}: expected a fit (from Model.fit or cemodel.load_result), "
                           f"found {type(fit).__name__}", hint=f"call {_USAGE[what]}")
        other = getattr(fit, "model", None)
        if isinstance(other, Model) and other.stages.model.source.text != (
                self.stages.model.source.text):
            raise CemError(f"{what}: the fit is of model '{other.name}' ({other.path}), not "
                           f"of this one, '{self.name}' ({self.path})")
        hypers = set(self.module.ROLES.get("hyper", ()))
        if set(fit.hypers) != hypers:
            theirs = ", ".join(sorted(fit.hypers)) or "none"
            mine = ", ".join(sorted(hypers)) or "none"
            raise CemError(f"{what}: the fit's hyperparameters ({theirs}) are not this "
                           f"model's ({mine}): it is a fit of another model")

    def infer(self, data: Mapping[str, Any], fit: FitResult, *, max_local_iter: int = 100,
              local_tol: float = 1e-3) -> Inference:
        """The local step (mean field) on new data with ``fit``'s globals held fixed: the
        items' local posteriors and their part of the ELBO. Nothing of ``fit`` changes."""
        check_options(max_local_iter=max_local_iter, local_tol=local_tol)
        self._check_fit(fit, "infer")
        if self.data_plate is None:
            raise CemError("infer: the model has no data plate, so new data has no local "
                           "variables (every latent variable is global)")
        from .predictive import fit_sizes

        module = self.module
        # sizes that do not count items (K, V, features) are the fit's
        dims = fit_sizes(module.SPEC, fit.dims, self.data_plate)
        clock = time.perf_counter()
        s = module._prepare(data=data, hypers=fit.hypers, dims=dims, seed=0, init=fit.state,
                            start=None, max_local_iter=max_local_iter, local_tol=local_tol)
        zero_statistics(module, s)
        local_part = module.run_local_step(s, s.all_items, max_local_iter, local_tol)
        # the global factors' terms are linear in the statistics: with and without them
        with_data = module.elbo_of_globals(s)
        zero_statistics(module, s)
        without_data = module.elbo_of_globals(s)
        seconds = time.perf_counter() - clock
        result = module._result(s, [], False, seconds)
        globals_ = {f"lam_{name}" for name in self.stages.plan.globals}
        for name, value in result.state.items():  # the local step must not move a global
            if name.rsplit("_", 1)[0] in globals_ and not np.array_equal(value, fit.state[name]):
                raise CemInternalError(f"infer: the local step changed the global {name}")
        keep = self.item_locals
        posterior = {k: v for k, v in result.posterior.items()
                     if k.split(".")[0] in keep or any(k.endswith(f" {n}]") for n in keep)}
        return Inference(posterior, float(local_part + with_data - without_data),
                         len(s.all_items), seconds)

    def smoothed_states(self, data: Mapping[str, Any], fit: FitResult) -> dict[str, Smoothed]:
        """Each GaussianChain's E[x_t] and Cov(x_t) per sequence of ``data`` given ``fit``'s
        globals: the Kalman/RTS smoother of a linear dynamical system (``cemodel.chains``)."""
        from .chains import smoothed_states

        self._check_fit(fit, "smoothed_states")
        return smoothed_states(self.module, self.stages.model, data, fit)

    # -- after the fit: cemodel.predictive, cemodel.scoring ------------------------------------

    def sample_posterior_predictive(self, result: FitResult, draws: int = 100, seed: int = 0,
                                    *, data: Mapping[str, Any] | None = None,
                                    new: bool = False,
                                    dims: Mapping[str, int] | None = None
                                    ) -> dict[str, np.ndarray]:
        """Replicated observations, {observed variable: (draws, ...)}: globals from q, then
        the model; the fit's items (``data`` None or the fit's data) with their locals from
        q, or ``new=True`` items with their locals from the prior (``cemodel.predictive``)."""
        from .predictive import sample_posterior_predictive

        self._check_fit(result, "sample_posterior_predictive")
        return sample_posterior_predictive(self, result, draws, seed, data=data, new=new,
                                           dims=dims)

    def posterior_draws(self, result: FitResult, draws: int = 100,
                        seed: int = 0) -> dict[str, np.ndarray]:
        """Draws of every global from q, {variable: (draws, ...)} (``Model.score`` uses the
        same draws for the same seed)."""
        from .predictive import posterior_draws

        self._check_fit(result, "posterior_draws")
        return posterior_draws(self, result, draws, seed)

    def score(self, result: FitResult, heldout: Mapping[str, Any], *, draws: int = 100,
              seed: int = 0, max_local_iter: int = 100, local_tol: float = 1e-3) -> Score:
        """Held-out scores of new items per item (``cemodel.scoring.Score``): ``elbo``, the
        held-out ELBO (locals by the local step, globals fixed at q: a lower bound);
        ``log_predictive``, exact where the locals sum out (mixtures, HMMs, models without
        locals), Monte Carlo over ``draws`` of q(globals); ``perplexity`` of topic models."""
        from .predictive import checked_draws
        from .scoring import score

        checked_draws(draws, seed)
        self._check_fit(result, "score")
        if self.data_plate is None:
            raise CemError("score: the model has no data plate, so no held-out items")
        inference = self.infer(heldout, result, max_local_iter=max_local_iter,
                               local_tol=local_tol)
        return score(self, result, heldout, inference, topic_structure(self.stages.model),
                     draws, seed, max_local_iter, local_tol)


# how each method that reads a fit takes it (its message when given something else)
_USAGE = {
    "infer": "model.infer(data, fit)",
    "score": "model.score(fit, heldout)",
    "smoothed_states": "model.smoothed_states(data, fit)",
    "sample_posterior_predictive": "model.sample_posterior_predictive(fit, draws, seed, "
                                   "data=...)",
    "posterior_draws": "model.posterior_draws(fit, draws, seed)",
}


def load_result(path: str | Path, model: Model | str | Path) -> Fit:
    """The ``Fit`` saved in ``path`` (``Fit.save``, ``cemodel fit -o``: .npz or .nc) of
    ``model`` (a ``Model``, a model file or a library name), as it was: ``fit.mean("beta")``,
    ``model.infer(data, fit)``, ``model.fit(data, init=fit.state)``. A file of another model
    source or saved-fit format version is refused (``cemodel.saved``)."""
    from .saved import read_saved

    model = model if isinstance(model, Model) else Model(model)
    return Fit(**read_saved(path, model.stages.model.source), model=model)


def _model(path: str, settings: dict[str, float],
           collapse: tuple[str, ...] | None = None) -> Model:
    return Model(path, collapse=collapse, **settings)


# ---------------------------------------------------------------------------------------------
# scikit-learn
# ---------------------------------------------------------------------------------------------

try:
    from sklearn.base import BaseEstimator, TransformerMixin
except ImportError:  # scikit-learn is optional: CemEstimator then says what to install

    class BaseEstimator:  # type: ignore[no-redef]
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            raise ImportError("CemEstimator needs scikit-learn: pip install scikit-learn")

    class TransformerMixin:  # type: ignore[no-redef]
        pass


class CemEstimator(TransformerMixin, BaseEstimator):
    """A cemodel model as a scikit-learn estimator (``Pipeline``, ``GridSearchCV``, ``clone``).

    Parameters (stored unchanged, as scikit-learn requires):

    model : a model file, a library name (``"lda"``, ``"gmm"``) or a ``Model``.
    K : the size of dimension ``K`` (components, topics), given to ``fit`` as ``dims``, so
        every K shares one compiled module; None keeps the model file's default.
    method, local : the global and local step (``Model.fit``).
    max_iter : iterations (``mf``, ``klc``) or epochs (the stochastic methods); None: the
        default.
    seed : the fit's seed (starts, minibatches); also seeds the perplexity split.
    hypers : hyperparameter values, e.g. ``{"alpha": 0.1}``.
    learn : hyperparameters to set by empirical Bayes, e.g. ``("alpha",)``.
    settings : compile-time settings of the model file (``--set``), e.g. ``{"eta": 0.05}``.
    fit_options : further options of the generated function (``tol``, ``batch_size``,
        ``kappa``, ``max_local_iter``, ``local_tol``, ...).
    score_by : ``"auto"`` (topic models: ``"perplexity"``, else ``"elbo"``), ``"perplexity"``
        (the mean held-out log likelihood per word by document completion,
        ``cemodel.evaluation``; i.e. −log perplexity) or ``"elbo"`` (the held-out ELBO of X
        under the fitted globals, per item). Greater is better.

    X is the data of the model's single observed variable (LDA: a document-term count matrix;
    GMM: an N × D array); a model with several observed variables or covariates takes a dict.

    Fitted attributes: ``result_`` (a ``Fit``), ``model_`` (the ``Model``), ``module_`` (the
    generated module), ``n_features_in_`` (for array X).
    """

    def __init__(self, model: Any = "lda", K: int | None = None, method: str = "mf",
                 local: str = "mf", max_iter: int | None = None, seed: int | None = 0,
                 hypers: dict | None = None, learn: tuple | str = (),
                 settings: dict | None = None, fit_options: dict | None = None,
                 score_by: str = "auto") -> None:
        self.model = model
        self.K = K
        self.method = method
        self.local = local
        self.max_iter = max_iter
        self.seed = seed
        self.hypers = hypers
        self.learn = learn
        self.settings = settings
        self.fit_options = fit_options
        self.score_by = score_by

    def __sklearn_tags__(self):  # noqa: ANN204 - sklearn's Tags
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = []
        return tags

    # -- helpers -----------------------------------------------------------------------------

    def _model(self) -> Model:
        if isinstance(self.model, Model):
            return self.model
        return Model(self.model, **(self.settings or {}))

    def _data(self, model: Model, X: Any) -> dict[str, Any]:
        if isinstance(X, Mapping):
            return dict(X)
        if len(model.inputs) != 1:
            raise CemError(f"X: model {model.name} takes {', '.join(model.inputs)}; pass X "
                           "as a dict from each name to its data")
        return {model.inputs[0]: X}

    def _check_features(self, X: Any) -> None:
        shape = getattr(X, "shape", None)
        expected = getattr(self, "n_features_in_", None)
        if expected is not None and shape is not None and len(shape) == 2 \
                and shape[1] != expected:
            raise ValueError(f"X has {shape[1]} features, but {type(self).__name__} is "
                             f"expecting {expected} features as input.")

    def _local_options(self) -> dict[str, Any]:
        options = self.fit_options or {}
        return {k: options[k] for k in ("max_local_iter", "local_tol") if k in options}

    def _infer(self, X: Any) -> Inference:
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        self._check_features(X)
        return self.model_.infer(self._data(self.model_, X), self.result_,
                                 **self._local_options())

    # -- the estimator -----------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> CemEstimator:
        """Fit the model to X (y is ignored: the models are unsupervised)."""
        model = self._model()
        options = dict(self.fit_options or {})
        if self.K is not None:
            options["dims"] = {**options.get("dims", {}), "K": int(self.K)}
        if self.max_iter is not None:
            batch = self.method in ("mf", "klc")  # iterations; the stochastic methods' epochs
            options["max_iter" if batch else "epochs"] = int(self.max_iter)
        if self.seed is not None:
            options["seed"] = self.seed
        if self.hypers is not None:
            options["hypers"] = self.hypers
        if self.learn:
            options["learn"] = self.learn
        result = model.fit(self._data(model, X), self.method, local=self.local, **options)
        self.model_, self.module_, self.result_ = model, model.module, result
        shape = getattr(X, "shape", None)
        if not isinstance(X, Mapping) and shape is not None and len(shape) == 2:
            self.n_features_in_ = int(shape[1])
        return self

    def transform(self, X: Any) -> np.ndarray:
        """The posterior mean of each item's locals with the fitted globals held fixed (LDA:
        the document-topic proportions θ, rows summing to 1; mixtures: q(z)); items × k."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        if not self.model_.item_locals:
            raise CemError(f"transform: model {self.model_.name} has no local variable per "
                           "item to transform into")
        inference = self._infer(X)
        return np.hstack([inference.mean(v).reshape(inference.items, -1)
                          for v in self.model_.item_locals])

    def score(self, X: Any, y: Any = None) -> float:
        """Held-out objective of X, greater is better (see ``score_by``)."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        if self.score_by not in ("auto", "perplexity", "elbo"):
            raise ValueError(f"score_by: expected 'auto', 'perplexity' or 'elbo', found "
                             f"{self.score_by!r}")
        topic = topic_structure(self.model_.stages.model)
        by = ("perplexity" if topic else "elbo") if self.score_by == "auto" else self.score_by
        if by == "elbo":
            inference = self._infer(X)
            return inference.elbo / max(inference.items, 1)
        if topic is None:
            raise CemError(f"score_by='perplexity' needs a topic model; {self.model_.name} "
                           "is not LDA-shaped", hint="score_by='elbo'")
        from .scoring import completion

        self._check_features(X)
        options = self._local_options()
        return completion(self.model_, self.result_, self._data(self.model_, X), topic,
                          seed=self.seed or 0, max_local_iter=options.get("max_local_iter", 100),
                          local_tol=options.get("local_tol", 1e-3))

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """``theta0, theta1, ...``: the columns of ``transform``."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        names = []
        for var in self.model_.item_locals:
            mean = self.result_.mean(var)
            width = int(np.prod(mean.shape[1:])) if mean.ndim > 1 else 1
            names += [f"{var}{i}" for i in range(width)]
        return np.asarray(names, dtype=object)

    # a fitted estimator pickles without its module (recompiled from the disk cache on load)
    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())  # a copy: object's is the live __dict__
        state.pop("module_", None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        if "model_" in state:
            self.module_ = self.model_.module
