"""`cemodel compile | check | fit | graph | plot | predict | summarize`: the command line.

A user's mistake prints a located message and exits with status 2; no
traceback, and no output file is left behind.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np

from .errors import CemError, CemInternalError, CemOptionError
from .files import CemCacheWarning
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

GRAPH_SUFFIXES = (".png", ".svg", ".pdf", ".dot")


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cemodel",
        description="Compile conjugate-exponential models (.cem) to numba variational inference.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"cemodel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", help="the .cem model file")
        p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="override a dimension or scalar hyperparameter (repeatable)")

    def collapse(p: argparse.ArgumentParser) -> None:
        p.add_argument("--collapse", default=None, metavar="NAME,...",
                       help="klc: the variables to integrate out (default: the model file's "
                       "'collapse', else every latent but the categorical assignments)")

    p = sub.add_parser("check", help="print each variable's complete conditional and the "
                       "methods that apply", epilog="example: cemodel check lda.cem")
    common(p)
    collapse(p)
    p = sub.add_parser("compile", help="write the generated Python module",
                       epilog="example: cemodel compile lda.cem -o lda_vi.py --set K=50")
    common(p)
    p.add_argument("-o", "--output", help="output .py file (default: MODEL_vi.py)")
    p.add_argument("--dump", choices=["kernel-plan"],
                   help="print a stage's output instead of writing the module: kernel-plan, "
                   "every decision of the code generator (knowns, hoisted messages, product "
                   "form, exp arrays, restart guard, default start, array roles)")
    p = sub.add_parser("fit", help="compile (cached), load data, fit, write the posterior",
                       epilog="example: cemodel fit lda.cem --data corpus.npz -o post.npz")
    common(p)
    p.add_argument("--data", required=True, help=".npz, .npy, .csv, .mtx or UCI docword file")
    p.add_argument("--method", default="mf",
                   help="mf: batch coordinate ascent; svi: stochastic VI over the data plate; "
                   "svi+: SVI with tuneable annealing (needs --effective-batch-size); ssvi-a, "
                   "ssvi: structured SVI (Hoffman & Blei 2015), globals sampled in the local "
                   "step, ssvi with the V(β, λ) correction; klc: the KL-corrected collapsed "
                   "bound by Riemannian conjugate gradients (Hensman et al. 2012)")
    p.add_argument("--cg", default="fr", choices=["fr", "pr", "hs", "none"],
                   help="klc: conjugate directions by Fletcher–Reeves, Polak–Ribière, "
                   "Hestenes–Stiefel, or none (steepest ascent, which is VBEM)")
    p.add_argument("--line-search", action="store_true",
                   help="klc: halve a step that lowers the bound before restarting")
    collapse(p)
    p.add_argument("--local", default="mf", choices=["mf", "exact", "gibbs", "cvb0"],
                   help="the local step (E-step): mean field, the exact conditional, Gibbs "
                   "sampling or CVB0 with local proportions integrated out (see cemodel check)")
    _option(p, "gibbs_sweeps", 10, "gibbs: sweeps per item")
    _option(p, "gibbs_burn_in", 5, "gibbs: sweeps discarded before averaging")
    p.add_argument("--stream", action="store_true",
                   help="svi methods: read the data from disk a minibatch at a time (out of "
                        "core: .npy, .npz, .mtx, docword)")
    p.add_argument("--ramp", action="store_true",
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
    p.add_argument("--checkpoint", metavar="PATH", default=None,
                   help="write the fit's state to PATH (atomically) as it goes")
    _option(p, "checkpoint_every", 1, "with --checkpoint: every N iterations (mf) or epochs",
            metavar="N")
    p.add_argument("--resume", metavar="PATH", default=None,
                   help="continue the fit saved in PATH (same model, data and options)")
    _option(p, "seed", 0, "the random streams' seed")
    _option(p, "max_iter", 200, "mf, klc: iterations at most")
    _option(p, "tol", 1e-6, "mf: stop when the relative change of the ELBO is below this; "
            "klc: the change of the bound (nats) or the squared gradient norm")
    _option(p, "epochs", None, "svi: passes over the data (default: 10, or enough steps that "
            "λ keeps < 1e-3 of its start, at most 200; on a small data set at least 1,000 "
            "steps)")
    _option(p, "batch_size", 256, "svi: minibatch size |S|")
    _option(p, "kappa", None, "svi: step size s·(t + tau)^-kappa (default 0.7; 0.5 on a small "
            "data set)")
    _option(p, "tau", None, "svi: step size delay (default 10; 1 on a small data set)")
    _option(p, "step_scale", 1.0, "svi: step size scale s")
    p.add_argument("--learning-rate", choices=("decay", "adaptive"), default=None,
                   help="svi, ssvi-a, svi-avg: 'decay' (s·(t + tau)^-kappa) or 'adaptive' "
                   "(Ranganath et al. 2013, no schedule); default: decay")
    p.add_argument("--average", action=argparse.BooleanOptionalAction, default=None,
                   help="svi, svi+, ssvi-a, ssvi: report the average of the last half's "
                   "iterates (default: ssvi-a on a small data set only)")
    _option(p, "effective_batch_size", None, "svi+: the effective batch size M <= |S|")
    p.add_argument("--learn", default=None, metavar="HYPER,...",
                   help="hyperparameters to set by empirical Bayes (e.g. alpha,eta); "
                   "stochastic methods take a step towards the batch's value each step")
    p.add_argument("-o", "--output", help="the fit: .npz (default: MODEL_posterior.npz), or "
                   ".nc, ArviZ's InferenceData as netCDF (needs the arviz extra)")
    _option(p, "draws", 1000, "with -o FILE.nc: exact draws from q in its posterior group")
    p.add_argument("--quiet", action="store_true", help="no per-iteration progress")

    p = sub.add_parser("graph", help="draw the plate diagram (.png, .svg, .pdf or .dot)",
                       epilog=GRAPH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    common(p)
    collapse(p)
    p.add_argument("-o", "--output", help="output file: .png, .svg, .pdf or .dot "
                   "(default: MODEL_graph.png)")
    p.add_argument("--no-hypers", dest="hypers", action="store_false",
                   help="leave the hyperparameters out")

    def posterior(p: argparse.ArgumentParser) -> None:
        p.add_argument("posterior", help="a posterior .npz or .nc written by cemodel fit -o")
        p.add_argument("--model", help="the .cem model that was fitted (exact families)")
        p.add_argument("--vocab", help="a vocabulary file, one word per line, for topics")
        _option(p, "top", 10, "words per topic and weights listed (default 10)")

    p = sub.add_parser("plot", help="plot a posterior: ELBO trace, weights, topics, clusters",
                       epilog=PLOT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    posterior(p)
    p.add_argument("--data", help="N × 2 points (.npz, .npy or .csv) drawn under 2-D clusters")
    p.add_argument("-o", "--output",
                   help="output .png, .svg or .pdf (default: POSTERIOR with .png)")
    p = sub.add_parser("predict", help="draw replicated data from a posterior (the posterior "
                       "predictive)", epilog=PREDICT_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    common(p)
    p.add_argument("fit", help="the posterior .npz written by cemodel fit -o")
    p.add_argument("data", help="the items (.npz, .npy, .csv, .mtx or UCI docword): the fit's "
                   "data, or new items with --new")
    p.add_argument("--new", action="store_true",
                   help="the items are new: their locals from the prior, not the posterior")
    _option(p, "draws", 100, "replicated data sets")
    _option(p, "seed", 0, "the random stream's seed")
    p.add_argument("-o", "--output", help="output .npz (default: MODEL_predictive.npz)")
    p = sub.add_parser("summarize", help="a text report of a posterior",
                       epilog=SUMMARIZE_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    posterior(p)
    p.add_argument("--prob", type=_probability, default=0.94,
                   help="the probability of the central intervals (default 0.94)")
    return parser


def _stages(args):
    from .compiler import parse_settings, read_source, run_stages

    text, filename = read_source(args.model)
    collapse = getattr(args, "collapse", None)
    if collapse is not None:
        collapse = tuple(name.strip() for name in collapse.split(",") if name.strip())
        if getattr(args, "method", "klc") != "klc":
            raise CemError("--collapse is for --method klc")
    return run_stages(text, filename, parse_settings(args.set), collapse)


def cmd_check(args) -> int:
    from .check import check_report

    print(check_report(_stages(args).plan))
    return 0


def cmd_compile(args) -> int:
    from .compiler import generate
    from .files import write_text

    stages = _stages(args)
    if args.dump == "kernel-plan":
        from .codegen.dump import dump_kernel_plan
        from .codegen.lowering import lower

        print(dump_kernel_plan(lower(stages.plan)), end="")
        return 0
    source = generate(stages)
    out = Path(args.output or f"{stages.model.name}_vi.py")
    write_text(out, source)
    print(f"wrote {out}")
    return 0


def _fit_summary(args, method, result, stages) -> str:
    """The line `cemodel fit` prints when a fit ends."""
    if method.stochastic:
        return f"{args.method} ({args.local} local step): {result.iterations} epochs"
    status = "converged" if result.converged else "stopped at --max-iter"
    if args.method == "klc":
        return (f"klc ({args.cg}, collapsed {', '.join(stages.plan.collapse.collapsed)}): "
                f"{status} after {result.notes['iterations']} iterations, "
                f"{result.notes['restarts']} restarts")
    return f"{status} after {result.iterations} iterations"


def cmd_fit(args) -> int:
    from .compiler import compile_stages, parse_settings
    from .data import load_data
    from .runtime.drivers import DRIVERS

    if args.method not in DRIVERS:
        raise CemError(f"--method: expected one of {', '.join(DRIVERS)}, found {args.method!r}")
    stages = _stages(args)
    why = dict(stages.plan.methods)[args.method]
    if not why.startswith("yes"):
        raise CemError(f"--method {args.method} does not apply to this model: "
                       f"{why.removeprefix('no: ')}")
    why = dict(stages.plan.local_steps)[args.local]
    if args.method == "klc" and args.local != "mf":
        raise CemError(f"--local {args.local}: KLC-CG has no local step (it optimises q(Z) "
                       "directly)")
    if args.method == "klc" and (args.checkpoint or args.resume):
        raise CemError("--checkpoint and --resume are not available for --method klc")
    if not why.startswith("yes"):
        raise CemError(f"--local {args.local} does not apply to this model: "
                       f"{why.removeprefix('no: ')}")
    if args.method == "svi+" and args.effective_batch_size is None:
        raise CemError("--method svi+ needs --effective-batch-size M (M < --batch-size)")
    if args.threads is not None:
        import numba

        most = numba.config.NUMBA_NUM_THREADS
        if not 1 <= args.threads <= most:
            raise CemError(f"--threads: expected 1 to {most} (NUMBA_NUM_THREADS), "
                           f"found {args.threads}")
        numba.set_num_threads(args.threads)
    if args.stream and args.method in ("mf", "klc"):
        raise CemError(f"--stream: --method {args.method} visits every item at every "
                       "iteration; out of core applies to svi, svi+, ssvi-a and ssvi")
    if args.stream and (args.dask or args.scheduler):
        raise CemError("--stream does not run on Dask: every worker binds the whole data set")
    module = compile_stages(stages)
    if args.stream:  # read a minibatch at a time from disk
        from .streaming import open_model_source

        data = open_model_source(module, stages.model.data_plate, args.data)
    else:
        data = load_data(args.data, module.SPEC)
    # a dimension given with --set is the user's: a conflict with the data names --set
    settings = parse_settings(args.set)
    dims = {d.name: d.default for d in stages.model.dims if d.name in settings}
    out = Path(args.output or f"{stages.model.name}_posterior.npz")
    if out.suffix.lower() == ".nc":  # refused before the fit when the extra is missing
        from .arviz_export import import_arviz

        import_arviz()

    method = DRIVERS[args.method]
    unit = "epoch" if method.stochastic else "iter"
    bar = None
    if not args.quiet and sys.stderr.isatty():  # a terminal: a progress bar with ELBO and ETA
        from tqdm import tqdm

        total = args.epochs if method.stochastic else args.max_iter
        bar = tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)

    def progress(iteration: int, elbo: float, seconds: float) -> None:
        if bar is not None:
            bar.update(iteration + 1 - bar.n)
            bar.set_postfix_str(f"elbo {elbo:.6e}")
        elif not args.quiet:  # a log: one line per iteration
            print(f"{unit} {iteration + 1:4d}  elbo {elbo: .6e}  {seconds:8.2f} s", flush=True)

    def klc_progress(iteration: int, bound: float, norm: float, seconds: float) -> None:
        if bar is not None:
            bar.update(iteration - bar.n)
            bar.set_postfix_str(f"bound {bound:.6e} |g|² {norm:.2e}")
        elif not args.quiet:
            print(f"{unit} {iteration:4d}  bound {bound: .6e}  |g|² {norm:9.3e}  "
                  f"{seconds:8.2f} s", flush=True)

    extra: dict = {"learn": args.learn} if args.learn else {}
    if args.checkpoint:
        extra.update(checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every)
    if args.resume:
        extra["resume"] = args.resume
    if args.learn and not getattr(module, "LEARNABLE", ()):
        raise CemError("--learn: this model has no hyperparameter empirical Bayes can set")
    if stages.model.data_plate is not None and args.method != "klc":
        extra["local"] = args.local
    if args.local == "gibbs":
        extra.update(gibbs_sweeps=args.gibbs_sweeps, gibbs_burn_in=args.gibbs_burn_in)
    runner = None
    if args.dask or args.scheduler:  # the local step on a Dask cluster, the rest here
        from functools import partial

        from .distributed import fit as distributed_fit

        if args.method == "klc":
            raise CemError("--method klc does not run on Dask: it optimises every item's q(z) "
                           "jointly, with no local step to distribute")
        runner = partial(distributed_fit, args.model, method=args.method,
                         client=args.dask or args.scheduler, settings=settings)
    if args.method == "klc":
        if args.learn:
            raise CemError("--learn is not available for --method klc")
        options = dict(cg=args.cg, max_iter=args.max_iter, tol=args.tol, gtol=args.tol,
                       seed=args.seed, line_search=args.line_search, callback=klc_progress)
    elif method.stochastic:
        options = dict(epochs=args.epochs, batch_size=args.batch_size, kappa=args.kappa,
                       tau=args.tau, step_scale=args.step_scale, seed=args.seed,
                       learning_rate=args.learning_rate,
                       **({} if args.average is None else {"average": args.average}),
                       callback=progress, ramp=args.ramp, **extra,
                       effective_batch_size=args.effective_batch_size
                       if args.method == "svi+" else None)
    else:
        options = dict(max_iter=args.max_iter, tol=args.tol, seed=args.seed, callback=progress,
                       **extra)
    try:
        if runner is not None:
            result = runner(data, dims=dims, **options)
        else:
            result = method.run(module, data, dims=dims, **options)
        done = _fit_summary(args, method, result, stages)
        if runner is not None:
            done += f" on Dask ({result.notes['dask_partitions']} partitions)"
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        kept = (f"; {args.checkpoint} holds the last complete checkpoint: continue with "
                f"--resume {args.checkpoint}" if args.checkpoint else
                "; use --checkpoint PATH to keep a fit's progress")
        print(f"interrupted: {out} not written{kept}", file=sys.stderr)
        return 130
    if bar is not None:
        bar.close()
    print(f"{done}, {result.seconds:.2f} s; ELBO {result.elbo[-1]:.6e}")
    for name, report in result.notes.get("components", {}).items():  # stick-breaking weights
        print(f"{name}: {report['components_used']} of {len(report['counts'])} components "
              "used (expected items >= 1% of all and >= 1)")
    if args.learn:
        learned = ", ".join(f"{k} = {v:.6g}" for k, v in result.hypers.items()
                            if k in args.learn.split(","))
        print(f"learned: {learned}")
    _write_fit(out, stages, module, result, args, None if args.stream else data)
    print(f"wrote {out}")
    return 0


def _write_fit(out: Path, stages, module, result, args, data) -> None:
    """The fit as ``cemodel.saved`` writes it: an .nc is ArviZ's InferenceData (with the
    data), any other name the .npz (``cemodel.load_result`` reads both)."""
    from .files import write_bytes
    from .saved import fit_meta, netcdf_bytes, npz_bytes

    meta = fit_meta(stages, result, args.method, args.local, args.seed)
    if out.suffix.lower() != ".nc":
        write_bytes(out, npz_bytes(result, meta))
        return
    from .arviz_export import to_inference_data

    idata = to_inference_data(stages.plan, module.SPEC, result, meta, draws=args.draws,
                              seed=args.seed, data=data)
    write_bytes(out, netcdf_bytes(idata))


def _output(path: str, suffixes: tuple[str, ...], what: str) -> tuple[Path, str]:
    """The output path and its format, refused before any work when the suffix is unknown."""
    out = Path(path)
    if out.suffix.lower() not in suffixes:
        found = f"'{out.suffix}'" if out.suffix else "no extension"
        kinds = f"{', '.join(suffixes[:-1])} or {suffixes[-1]}" if len(suffixes) > 1 \
            else suffixes[0]
        raise CemError(f"cannot write {out}: {what} writes {kinds}, found {found}")
    return out, out.suffix.lower().lstrip(".")


def cmd_graph(args) -> int:
    from .compiler import built_model, parse_settings, read_source
    from .files import write_bytes, write_text
    from .graph import diagram, layout_diagram, to_dot

    if args.output:
        out, fmt = _output(args.output, GRAPH_SUFFIXES, "cemodel graph")
    text, filename = read_source(args.model)
    # the diagram needs the model only (parse, build, --set), not conjugacy: a model that
    # `check` refuses can still be drawn
    model = built_model(text, filename, parse_settings(args.set))
    if not args.output:
        out, fmt = Path(f"{model.name}_graph.png"), "png"
    collapsed: tuple[str, ...] = ()
    try:  # the KLC collapse set, drawn dashed, where the model's plan has one
        plan = _stages(args).plan
        collapsed = plan.collapse.collapsed if plan.collapse is not None else ()
        for block in plan.model.blocks:  # the diagram draws a joint block's members
            if block.name in collapsed:
                collapsed += (block.mean.name, block.precision.name)
    except CemError:
        if args.collapse is not None:
            raise
    shown = diagram(model, hypers=args.hypers, collapsed=collapsed)
    if fmt == "dot":
        write_text(out, to_dot(shown))
    else:
        from .plots import render_diagram

        write_bytes(out, render_diagram(layout_diagram(shown), fmt))
    print(f"wrote {out}")
    return 0


def _posterior(args):
    from .plots import load_posterior, read_vocab

    model = None
    if args.model:
        from .compiler import fitted_model, read_source

        model = fitted_model(*read_source(args.model))
    vocab = read_vocab(args.vocab) if args.vocab else None
    return load_posterior(args.posterior, model), vocab


def cmd_plot(args) -> int:
    from .files import write_bytes
    from .plots import FORMATS, load_points, plot_posterior

    target = args.output or str(Path(args.posterior).with_suffix(".png"))
    out, fmt = _output(target, tuple(f".{f}" for f in FORMATS), "cemodel plot")
    post, vocab = _posterior(args)
    points = load_points(args.data, post) if args.data else None
    try:
        with np.errstate(all="ignore"):  # an edited posterior's 1e308: inf in a panel
            figure = plot_posterior(post, fmt, vocab, args.top, points)
    except (ValueError, OverflowError) as exc:  # matplotlib: no axis spans -1e308 to 1e308
        shown = args.posterior + (f" with the points of {args.data}" if args.data else "")
        raise CemError(f"cannot draw {shown}: the values are beyond what a figure can show "
                       f"({exc})") from None
    write_bytes(out, figure)
    print(f"wrote {out}")
    return 0


def cmd_predict(args) -> int:
    from .api import Model
    from .compiler import parse_settings
    from .data import load_data
    from .files import write_npz
    from .plots import load_posterior
    from .predictive import Posterior, sample_posterior_predictive

    out, _ = _output(args.output or f"{Path(args.model).stem}_predictive.npz", (".npz",),
                     "cemodel predict")
    model = Model(args.model, **parse_settings(args.set))
    posterior = load_posterior(args.fit, model.stages.model)
    data = load_data(args.data, model.module.SPEC)
    replicated = sample_posterior_predictive(model, Posterior(dict(posterior.arrays), {}, {}),
                                             args.draws, args.seed, data=data, new=args.new)
    write_npz(out, replicated)
    shapes = ", ".join(f"{k} {v.shape}" for k, v in replicated.items())
    print(f"wrote {out}: {shapes}")
    return 0


def cmd_summarize(args) -> int:
    from . import intervals
    from .plots import summarize

    post, vocab = _posterior(args)
    with np.errstate(all="ignore"):  # an edited posterior's 1e308: inf in the report
        print(summarize(post, vocab, args.top), end="")
        table = intervals.rows(intervals.file_factors(post.variables, post.model),
                               args.prob)
    if table:
        print(f"\nintervals (mean, sd and the central {args.prob:g} interval of each "
              "scalar marginal of q, closed form):")
        print("\n".join(intervals.text(table, args.prob)))
    return 0


def _too_deep(args) -> CemError | None:
    """A RecursionError while a command handled a model, as the located error of where the
    model nests deepest; None where there is no model to blame."""
    from .compiler import read_source
    from .limits import deepest_span, too_deep
    from .syntax import parse

    if not getattr(args, "model", None):
        return None
    try:
        program = parse(*read_source(args.model))
    except CemError:
        return None
    return too_deep(program.source, deepest_span(program))


_SHOW_WARNING = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warning: MESSAGE`` for a warning of cemodel's about the user's setup, Python's
    format (file, line, category) for the others."""
    if issubclass(category, CemCacheWarning):
        print(f"warning: {message}", file=sys.stderr)
    else:
        _SHOW_WARNING(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {"check": cmd_check, "compile": cmd_compile, "fit": cmd_fit, "graph": cmd_graph,
               "plot": cmd_plot, "predict": cmd_predict, "summarize": cmd_summarize
               }[args.command]
    try:
        with warnings.catch_warnings():  # cemodel's own warnings: one line each
            warnings.simplefilter("default", CemCacheWarning)
            warnings.showwarning = _show_warning
            return handler(args)
    except CemError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    except CemInternalError as exc:
        print(f"internal error: {exc}", file=sys.stderr)
        return 3
    except MemoryError as exc:  # --set K=1e12: an allocation no machine makes
        detail = f": {exc}" if str(exc) else ""
        print(CemError(f"not enough memory{detail}", hint="a dimension (--set) or the data "
                       "may be far larger than intended").render(), file=sys.stderr)
        return 2
    except RecursionError:  # past the stages' own guard (compiler.nesting_guard)
        located = _too_deep(args)
        if located is None:
            raise
        print(located.render(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `cemodel check m.cem | head`: the reader has gone
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - flushed at exit, quietly
        return 0


if __name__ == "__main__":
    sys.exit(main())
