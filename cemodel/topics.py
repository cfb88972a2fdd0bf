"""Topic-model roles of a model, found by its form (not its name): which observed variable is
the bag of words, which Dirichlet the topics, which the per-document proportions and its
concentration. Read by the scikit-learn estimator (``cemodel.api.CemEstimator``'s
perplexity) and by held-out scoring's words per document (``cemodel.scoring``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .model import GateIndex, PlateIndex, RConst, RHyper, RRepeat, RVar


@dataclass(frozen=True)
class TopicStructure:
    """An LDA-shaped model: bag of words ``words[d, n] ~ Categorical(topics[z[d, n]])``,
    ``z[d, n] ~ Categorical(proportions[d])``, ``proportions[d] ~ Dirichlet(alpha)``."""

    words: str
    topics: str
    proportions: str
    alpha: str | float  # the hyperparameter's name, or the constant

    def alpha_value(self, hypers: Mapping[str, Any]) -> Any:
        return hypers[self.alpha] if isinstance(self.alpha, str) else self.alpha


def topic_structure(model: Any) -> TopicStructure | None:
    """The topic-model roles of a built model (``Model.stages.model``), or None."""
    plate = model.data_plate
    observed = [v for v in model.variables if v.observed]
    if plate is None or len(observed) != 1:
        return None
    words = observed[0]
    arg = words.args[0] if words.args else None
    if (words.family != "Categorical" or len(words.plates) != 2 or words.plates[0] != plate
            or not isinstance(arg, RVar) or len(arg.indices) != 1
            or not isinstance(arg.indices[0], GateIndex)
            or not isinstance(arg.indices[0].var, RVar)):
        return None
    topics, assignment = model.var(arg.name), model.var(arg.indices[0].var.name)
    if topics.family != "Dirichlet" or model.is_local(topics) \
            or assignment.family != "Categorical" or not model.is_local(assignment):
        return None
    probs = assignment.args[0]
    if not (isinstance(probs, RVar) and len(probs.indices) == 1
            and isinstance(probs.indices[0], PlateIndex) and probs.indices[0].plate == plate):
        return None
    proportions = model.var(probs.name)
    if proportions.family != "Dirichlet" or proportions.plates != (plate,):
        return None
    concentration = proportions.args[0]
    if isinstance(concentration, RRepeat):
        concentration = concentration.value
    if isinstance(concentration, RHyper):
        alpha: str | float = concentration.name
    elif isinstance(concentration, RConst):
        alpha = concentration.value
    else:
        return None
    return TopicStructure(words.name, topics.name, proportions.name, alpha)
