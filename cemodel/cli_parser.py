"""The command line's parser: one builder per subcommand, every numeric option checked by
its rule in ``cemodel.options`` (the rule the drivers apply to the same keyword) as it is
read, so a value out of range exits with status 2 naming the option, the range and the value.
"""

from __future__ import annotations

import argparse

from .errors import CemError, CemOptionError
from .options import RULES, check_workers
from .version import __version__

EPILOG = """examples:
  cemodel check stdlib_models/lda.cem
  cemodel compile stdlib_models/lda.cem -o lda_vi.py --set K=50
  cemodel fit stdlib_models/gmm.cem --data points.npz --set K=5 -o posterior.npz
  cemodel fit stdlib_models/gmm.cem --data points.npz -o fit.nc    # ArviZ InferenceData
  cemodel graph stdlib_models/lda.cem -o lda.png
  cemodel plot posterior.npz --model stdlib_models/gmm.cem --data points.npz -o fit.png
  cemodel summarize posterior.npz --model stdlib_models/gmm.cem
  cemodel predict stdlib_models/gmm.cem posterior.npz points.npz --set K=5 -o replicated.npz
"""

GRAPH_EPILOG = """examples:
  cemodel graph stdlib_models/lda.cem -o lda.png          # PNG, SVG or PDF (matplotlib)
  cemodel graph stdlib_models/gmm.cem -o gmm.svg --no-hypers
  cemodel graph stdlib_models/lda.cem -o lda.dot --set K=50   # Graphviz DOT text

Latent variables are white circles, observed ones grey, covariates grey squares and
hyperparameters small dots; a dashed edge is a categorical index selecting a component
(beta[z[d, n]]). Plates are boxes labelled with their index and size (tokens n ∈ N[d]).
A dashed circle is a variable KLC-CG integrates out (the collapse set, as cemodel check
prints it; --collapse NAME,... to draw another).
"""

PLOT_EPILOG = """examples:
  cemodel fit stdlib_models/lda.cem --data corpus.npz --set K=20 -o post.npz
  cemodel plot post.npz -o post.png --vocab vocab.txt
  cemodel plot gmm_post.npz --model stdlib_models/gmm.cem --data points.npz -o gmm.png

Panels: the ELBO trace; mixture weights (a global Dirichlet vector such as pi); top words
of each topic (a global Dirichlet table over a vocabulary, e.g. LDA's beta); and, for 2-D
Gaussian mixtures, component means with covariance ellipses (MVN means and Wishart
precisions) over the points of --data. --model makes the recognition exact.
"""

SUMMARIZE_EPILOG = """examples:
  cemodel summarize post.npz
  cemodel summarize post.npz --model stdlib_models/lda.cem --vocab vocab.txt --top 15

Prints the final ELBO and the number of iterations, each array's shape, minimum, mean and
maximum, each variable's family (and posterior mean when small), then the top words of
each topic, the mixture weights and the 2-D components, where the posterior has them, and
the mean, sd and central --prob interval of every scalar marginal of q (closed form).
"""

PREDICT_EPILOG = """examples:
  cemodel fit stdlib_models/gmm.cem --data points.npz --set K=3 -o post.npz
  cemodel predict stdlib_models/gmm.cem post.npz points.npz --set K=3 -o pp.npz
  cemodel predict stdlib_models/lda.cem post.npz new_docs.npz --new --draws 50 -o pp.npz

Writes one array per observed variable, draws first: globals drawn from the posterior, then
the model; the locals of DATA's items from the posterior where FIT holds them (the items FIT
was fitted to), or with --new (new items) from the prior. A bag of words comes back as counts
(draws × documents × vocabulary). Give the --set values the model was fitted with; the
hyperparameters are the model file's, not the ones saved in FIT (a learned one is not used).
"""


def _typed(name: str):
    """The argparse type of option ``name``: its rule (cemodel.options, the rule the drivers
    apply to the same keyword), so a value out of range is refused as the command line is
    read, with exit status 2 and the option, the range and the value."""
    rule = RULES[name]

    def parse(text: str):
        try:
            return rule.parse(text)
        except CemOptionError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    parse.__name__ = name
    return parse


def _probability(text: str) -> float:
    from .intervals import check_prob

    try:
        return check_prob(float(text))
    except (ValueError, CemError) as exc:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1, found "
                                         f"{text!r}") from exc


def _workers(text: str) -> str:
    try:
        check_workers(text)
    except CemOptionError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return text


def _option(p: argparse.ArgumentParser, name: str, default, help: str, **kw) -> None:  # noqa: A002
    """``--name`` checked by its rule, the values it takes appended to its help."""
    p.add_argument(RULES[name].flag, type=_typed(name), default=default,
                   help=f"{help}; takes {RULES[name].number}", **kw)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the .cem model file")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a dimension or scalar hyperparameter (repeatable)")


def _collapse(p: argparse.ArgumentParser) -> None:
    p.add_argument("--collapse", default=None, metavar="NAME,...",
                   help="klc: the variables to integrate out (default: the model file's "
                   "'collapse', else every latent but the categorical assignments)")


def _check(sub) -> None:
    p = sub.add_parser("check", help="print each variable's complete conditional and the "
                       "methods that apply", epilog="example: cemodel check lda.cem")
    _common(p)
    _collapse(p)


def _compile(sub) -> None:
    p = sub.add_parser("compile", help="write the generated Python module",
                       epilog="example: cemodel compile lda.cem -o lda_vi.py --set K=50")
    _common(p)
    p.add_argument("-o", "--output", help="output .py file (default: MODEL_vi.py)")
    p.add_argument("--dump", choices=["kernel-plan"],
                   help="print a stage's output (or write it to -o) instead of writing the "
                   "module: kernel-plan, every decision of the code generator (knowns, "
                   "hoisted messages, product form, exp arrays, restart guard, default "
                   "start, array roles)")


def _fit(sub) -> None:
    p = sub.add_parser("fit", help="compile (cached), load data, fit, write the posterior",
                       epilog="example: cemodel fit lda.cem --data corpus.npz -o post.npz")
    _common(p)
    p.add_argument("--data", required=True, help=".npz, .npy, .csv, .mtx or UCI docword file")
    p.add_argument("--method", default="mf",
                   help="mf: batch coordinate ascent; svi: stochastic VI over the data plate; "
                   "svi+: SVI with tuneable annealing (needs --effective-batch-size); ssvi-a, "
                   "ssvi: structured SVI (Hoffman & Blei 2015), globals sampled in the local "
                   "step, ssvi with the V(β, λ) correction; klc: the KL-corrected collapsed "
                   "bound by Riemannian conjugate gradients (Hensman et al. 2012)")
    # a method's own options default to None (filled in by cemodel.cli): given with another
    # method, they are refused rather than ignored
    p.add_argument("--cg", default=None, choices=["fr", "pr", "hs", "none"],
                   help="klc: conjugate directions by Fletcher–Reeves (the default), "
                   "Polak–Ribière, Hestenes–Stiefel, or none (steepest ascent, which is VBEM)")
    p.add_argument("--line-search", action="store_true", default=None,
                   help="klc: halve a step that lowers the bound before restarting")
    _collapse(p)
    p.add_argument("--local", default="mf", choices=["mf", "exact", "gibbs", "cvb0"],
                   help="the local step (E-step): mean field, the exact conditional, Gibbs "
                   "sampling or CVB0 with local proportions integrated out (see cemodel check)")
    _option(p, "gibbs_sweeps", None, "gibbs: sweeps per item (default 10)")
    _option(p, "gibbs_burn_in", None, "gibbs: sweeps discarded before averaging (default: "
            "half the sweeps)")
    p.add_argument("--stream", action="store_true", default=None,
                   help="svi methods: read the data from disk a minibatch at a time (out of "
                        "core: .npy, .npz, .mtx, docword)")
    p.add_argument("--ramp", action="store_true", default=None,
                   help="svi: grow N over the first epoch as items are seen (SSVI §2.6)")
    p.add_argument("--threads", type=int, default=None, metavar="N",  # range: in cmd_fit
                   help="threads for the local step (default: all, NUMBA_NUM_THREADS)")
    cluster = p.add_mutually_exclusive_group()
    cluster.add_argument("--dask", metavar="local:N", default=None, type=_workers,
                         help="run the local step on a Dask LocalCluster of N worker "
                         "processes (mf, svi, svi+, ssvi-a, ssvi; needs the dask extra)")
    cluster.add_argument("--scheduler", metavar="ADDRESS", default=None,
                         help="run the local step on the Dask cluster at ADDRESS "
                         "(tcp://host:8786)")
    _fit_run(p)


def _fit_run(p: argparse.ArgumentParser) -> None:
    """fit's options of the run itself: checkpoints, the schedule, empirical Bayes, output."""
    p.add_argument("--checkpoint", metavar="PATH", default=None,
                   help="write the fit's state to PATH (atomically) as it goes")
    _option(p, "checkpoint_every", None, "with --checkpoint: every N iterations (mf) or "
            "epochs (default 1)", metavar="N")
    p.add_argument("--resume", metavar="PATH", default=None,
                   help="continue the fit saved in PATH (same model, data and options)")
    _option(p, "seed", 0, "the random streams' seed")
    _option(p, "max_iter", None, "mf, klc: iterations at most (default 200)")
    _option(p, "tol", None, "mf: stop when the relative change of the ELBO is below this; "
            "klc: the change of the bound (nats) or the squared gradient norm (default 1e-6)")
    p.add_argument("--start", default=None, metavar="KIND",
                   help="the fit's start: seeds (k-means++ seed items or steps), random or "
                   "prior; each model takes its own (default: the model's, named by cemodel "
                   "compile --dump kernel-plan)")
    _option(p, "starts", None, "mf: random starts, each run --trial-iter iterations; the one "
            "with the highest ELBO continues (default 1)")
    _option(p, "trial_iter", None, "mf with --starts: iterations of each start (default 5)")
    _option(p, "epochs", None, "svi: passes over the data (default: 10, or enough steps that "
            "λ keeps < 1e-3 of its start, at most 200; on a small data set at least 1,000 "
            "steps, ssvi 3,000, ssvi-a 10,000)")
    _option(p, "batch_size", None, "svi: minibatch size |S| (default 256)")
    _option(p, "kappa", None, "svi: step size s·(t + tau)^-kappa (default 0.7; 0.5 on a small "
            "data set, except for ssvi)")
    _option(p, "tau", None, "svi: step size delay (default 10; 1 on a small data set, except "
            "for ssvi)")
    _option(p, "step_scale", None, "svi: step size scale s (default 1)")
    p.add_argument("--learning-rate", choices=("decay", "adaptive"), default=None,
                   help="svi, ssvi-a, svi-avg: 'decay' (s·(t + tau)^-kappa) or 'adaptive' "
                   "(Ranganath et al. 2013, no schedule); default: decay")
    p.add_argument("--average", action=argparse.BooleanOptionalAction, default=None,
                   help="svi, svi+, ssvi-a, ssvi: report the average of the last half's "
                   "iterates (default: ssvi-a on a small data set only)")
    _option(p, "effective_batch_size", None, "svi+ (and ssvi-a, ssvi, svi-avg annealed): the "
            "effective batch size M <= |S|")
    p.add_argument("--learn", default=None, metavar="HYPER,...",
                   help="hyperparameters to set by empirical Bayes (e.g. alpha,eta); "
                   "stochastic methods take a step towards the batch's value each step")
    p.add_argument("-o", "--output", help="the fit: .npz (default: MODEL_posterior.npz), or "
                   ".nc, ArviZ's InferenceData as netCDF (needs the arviz extra)")
    _option(p, "draws", None, "with -o FILE.nc: exact draws from q in its posterior group "
            "(default 1000)")
    p.add_argument("--quiet", action="store_true", help="no per-iteration progress")


def _graph(sub) -> None:
    p = sub.add_parser("graph", help="draw the plate diagram (.png, .svg, .pdf or .dot)",
                       epilog=GRAPH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    _collapse(p)
    p.add_argument("-o", "--output", help="output file: .png, .svg, .pdf or .dot "
                   "(default: MODEL_graph.png)")
    p.add_argument("--no-hypers", dest="hypers", action="store_false",
                   help="leave the hyperparameters out")


def _posterior(p: argparse.ArgumentParser) -> None:
    p.add_argument("posterior", help="a posterior .npz or .nc written by cemodel fit -o")
    p.add_argument("--model", help="the .cem model that was fitted (exact families)")
    p.add_argument("--vocab", help="a vocabulary file, one word per line, for topics")
    _option(p, "top", 10, "words per topic and weights listed (default 10)")


def _plot(sub) -> None:
    p = sub.add_parser("plot", help="plot a posterior: ELBO trace, weights, topics, clusters",
                       epilog=PLOT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _posterior(p)
    p.add_argument("--data", help="N × 2 points (.npz, .npy or .csv) drawn under 2-D clusters")
    p.add_argument("-o", "--output",
                   help="output .png, .svg or .pdf (default: POSTERIOR with .png)")


def _predict(sub) -> None:
    p = sub.add_parser("predict", help="draw replicated data from a posterior (the posterior "
                       "predictive)", epilog=PREDICT_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    p.add_argument("fit", help="the posterior .npz written by cemodel fit -o")
    p.add_argument("data", help="the items (.npz, .npy, .csv, .mtx or UCI docword): the fit's "
                   "data, or new items with --new")
    p.add_argument("--new", action="store_true",
                   help="the items are new: their locals from the prior, not the posterior")
    _option(p, "draws", 100, "replicated data sets")
    _option(p, "seed", 0, "the random stream's seed")
    p.add_argument("-o", "--output", help="output .npz (default: MODEL_predictive.npz)")


def _summarize(sub) -> None:
    p = sub.add_parser("summarize", help="a text report of a posterior",
                       epilog=SUMMARIZE_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _posterior(p)
    p.add_argument("--prob", type=_probability, default=0.94,
                   help="the probability of the central intervals (default 0.94)")


class _WholeNames(argparse.ArgumentParser):
    """A subcommand's parser that takes options by their whole names only."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, allow_abbrev=False, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """``cemodel``'s parser: a subcommand each for check, compile, fit, graph, plot, predict
    and summarize."""
    parser = argparse.ArgumentParser(
        prog="cemodel", allow_abbrev=False,
        description="Compile conjugate-exponential models (.cem) to numba variational inference.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"cemodel {__version__}")
    # no prefixes of options: --start would otherwise be read as --starts
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_WholeNames)
    for add in (_check, _compile, _fit, _graph, _plot, _predict, _summarize):
        add(sub)
    return parser
