"""`cemodel compile | check | fit | graph | plot | predict | summarize`: the command line.

A user's mistake prints a located message and exits with status 2; no
traceback, and no output file is left behind.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import numpy as np

from .cli_parser import build_parser
from .errors import CemError, CemInternalError
from .files import CemCacheWarning, refuse_overwriting

GRAPH_SUFFIXES = (".png", ".svg", ".pdf", ".dot")


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
    if args.dump == "kernel-plan" and not args.output:
        print(_kernel_plan(stages), end="")
        return 0
    out = Path(args.output or f"{stages.model.name}_vi.py")
    refuse_overwriting([("-o", out)], [("the model file", args.model)])
    write_text(out, _kernel_plan(stages) if args.dump == "kernel-plan" else generate(stages))
    print(f"wrote {out}")
    return 0


def _kernel_plan(stages) -> str:
    """``compile --dump kernel-plan``: every decision behind the kernels, as text."""
    from .codegen.dump import dump_kernel_plan
    from .codegen.lowering import lower

    return dump_kernel_plan(lower(stages.plan))


def _fit_summary(args, method, result, stages) -> str:
    """The line `cemodel fit` prints when a fit ends."""
    if method.stochastic:
        return f"{args.method} ({args.local} local step): {result.iterations} epochs"
    status = "converged" if result.converged else "stopped at --max-iter"
    if args.method == "klc":
        return (f"klc ({args.cg}, collapsed {', '.join(stages.plan.collapse.collapsed)}): "
                f"{status} after {result.notes['iterations']} iterations, "
                f"{result.notes['restarts']} restarts")
    trials = result.notes.get("starts")
    if trials:  # --starts N: which start continued
        kept = next(trial for trial in trials if trial["kept"])
        return (f"{status} after {result.iterations} iterations, from the best of "
                f"{len(trials)} starts (seed {kept['seed']}, ELBO {kept['elbo']:.6e} after "
                f"{kept['iterations']})")
    return f"{status} after {result.iterations} iterations"


def cmd_fit(args) -> int:
    from .compiler import compile_stages, parse_settings
    from .data import load_data
    from .runtime.drivers import DRIVERS
    from .saved import check_suffix

    stages = _stages(args) if args.method in DRIVERS else None
    _check_fit_args(args, stages)
    out = Path(args.output or f"{stages.model.name}_posterior.npz")
    refuse_overwriting([("-o", out), ("--checkpoint", args.checkpoint)],
                       [("the model file", args.model), ("--data", args.data)])
    check_suffix(out)  # any other name would hold an .npz
    # a resumed fit rewrites its own checkpoint (atomically, after reading it): -o may not
    refuse_overwriting([("-o", out)], [("--resume", args.resume)])
    module = compile_stages(stages)
    if args.stream:  # read a minibatch at a time from disk
        from .streaming import open_model_source

        data = open_model_source(module, stages.model.data_plate, args.data)
    else:
        data = load_data(args.data, module.SPEC)
    # a dimension given with --set is the user's: a conflict with the data names --set
    settings = parse_settings(args.set)
    dims = {d.name: d.default for d in stages.model.dims if d.name in settings}
    if out.suffix.lower() == ".nc":  # refused before the fit when the extra is missing
        from .arviz_export import import_arviz

        import_arviz()
    method = DRIVERS[args.method]
    bar, progress, klc_progress = _progress(args, method.stochastic)
    options, runner = _fit_options(args, stages, module, method.stochastic, settings,
                                   progress, klc_progress)
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
        if args.checkpoint and Path(args.checkpoint).is_file():
            kept = (f"; {args.checkpoint} holds the last complete checkpoint: continue with "
                    f"--resume {args.checkpoint}")
        elif args.checkpoint:  # interrupted before the first one was written
            kept = f"; no checkpoint was written yet to {args.checkpoint}"
        else:
            kept = "; use --checkpoint PATH to keep a fit's progress"
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


_STOCHASTIC = ("svi", "svi+", "ssvi-a", "ssvi", "svi-avg")
# fit's options that belong to some methods only: given with another they are refused, not
# ignored (their parser default is None; _FIT_DEFAULTS fills in the ones not given)
_METHOD_OPTIONS = {
    "max_iter": ("mf", "klc"), "tol": ("mf", "klc"), "starts": ("mf",), "trial_iter": ("mf",),
    "cg": ("klc",), "line_search": ("klc",),
    "epochs": _STOCHASTIC, "batch_size": _STOCHASTIC, "kappa": _STOCHASTIC,
    "tau": _STOCHASTIC, "step_scale": _STOCHASTIC, "learning_rate": _STOCHASTIC,
    "average": _STOCHASTIC, "ramp": _STOCHASTIC,
    # the annealed step of Paisley's SVI+; with structured or averaged SVI too, as in Python
    "effective_batch_size": ("svi+", "ssvi-a", "ssvi", "svi-avg"),
}
_FIT_DEFAULTS = {"max_iter": 200, "tol": 1e-6, "starts": 1, "cg": "fr", "line_search": False,
                 "batch_size": 256, "step_scale": 1.0, "ramp": False, "stream": False,
                 "gibbs_sweeps": 10, "checkpoint_every": 1, "draws": 1000}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_owned_options(args) -> None:
    """An option of another method, local step or output is refused, naming whose it is."""
    for dest, methods in _METHOD_OPTIONS.items():
        if getattr(args, dest) is None or args.method in methods:
            continue
        if dest == "effective_batch_size" and args.method == "svi":
            raise CemError("--effective-batch-size turns SVI into SVI+: use --method svi+")
        raise CemError(f"{_flag(dest)} does not apply to --method {args.method}: it is an "
                       f"option of {', '.join(methods)}")
    for dest in ("gibbs_sweeps", "gibbs_burn_in"):
        if getattr(args, dest) is not None and args.local != "gibbs":
            raise CemError(f"{_flag(dest)} is an option of --local gibbs, found --local "
                           f"{args.local}")
    if args.trial_iter is not None and (args.starts or 1) == 1:
        raise CemError("--trial-iter sets the iterations of each of --starts N (N > 1)")
    if args.checkpoint_every is not None and not args.checkpoint:
        raise CemError("--checkpoint-every needs --checkpoint PATH")
    out = args.output or ""
    if args.draws is not None and not out.lower().endswith(".nc"):
        raise CemError("--draws sets the draws of an -o FILE.nc (ArviZ's InferenceData); "
                       f"found {'-o ' + out if out else 'no -o'}")
    for dest, value in _FIT_DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, value)


def _check_fit_args(args, stages) -> None:
    """fit's options against each other and the model, before anything is compiled or read
    (``stages`` is None for an unknown --method)."""
    from .runtime.drivers import DRIVERS

    if args.method not in DRIVERS:
        raise CemError(f"--method: expected one of {', '.join(DRIVERS)}, found {args.method!r}")
    _check_owned_options(args)
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
        raise CemError("--method svi+ needs --effective-batch-size M (1 ≤ M ≤ --batch-size; "
                       "M = --batch-size is SVI)")
    if args.threads is not None:
        import numba

        most = numba.config.NUMBA_NUM_THREADS
        if not 1 <= args.threads <= most:
            raise CemError(f"--threads: expected 1 to {most} (NUMBA_NUM_THREADS), "
                           f"found {args.threads}")
        numba.set_num_threads(args.threads)
    if args.stream and args.method in ("mf", "klc"):
        raise CemError(f"--stream: --method {args.method} visits every item at every "
                       "iteration; out of core applies to svi, svi+, svi-avg, ssvi-a and ssvi")
    if args.stream and (args.dask or args.scheduler):
        raise CemError("--stream does not run on Dask: every worker binds the whole data set")


def _progress(args, stochastic: bool):
    """(a tqdm bar on a terminal or None, the drivers' callback, KLC's callback): a bar with
    the ELBO and the time left, else one line per iteration or epoch unless --quiet."""
    unit = "epoch" if stochastic else "iter"
    bar = None
    if not args.quiet and sys.stderr.isatty():  # a terminal: a progress bar with ELBO and ETA
        from tqdm import tqdm

        total = args.epochs if stochastic else args.max_iter
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

    return bar, progress, klc_progress


def _fit_options(args, stages, module, stochastic: bool, settings, progress, klc_progress):
    """(the driver's keyword options, a Dask runner or None) from fit's command line."""
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
    if args.start is not None:
        extra["start"] = args.start
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
                       seed=args.seed, line_search=args.line_search, callback=klc_progress,
                       **({} if args.start is None else {"start": args.start}))
    elif stochastic:
        options = dict(epochs=args.epochs, batch_size=args.batch_size, kappa=args.kappa,
                       tau=args.tau, step_scale=args.step_scale, seed=args.seed,
                       learning_rate=args.learning_rate,
                       **({} if args.average is None else {"average": args.average}),
                       callback=progress, ramp=args.ramp, **extra,
                       effective_batch_size=args.effective_batch_size)
    else:
        options = dict(max_iter=args.max_iter, tol=args.tol, seed=args.seed, callback=progress,
                       **extra)
        if args.starts > 1:  # MF only (_METHOD_OPTIONS)
            options.update(starts=args.starts, **({} if args.trial_iter is None else
                                                  {"trial_iter": args.trial_iter}))
    return options, runner


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
    from .graph import diagram, to_dot
    from .graph_layout import layout_diagram

    if args.output:
        out, fmt = _output(args.output, GRAPH_SUFFIXES, "cemodel graph")
    text, filename = read_source(args.model)
    # the diagram needs the model only (parse, build, --set), not conjugacy: a model that
    # `check` refuses can still be drawn
    model = built_model(text, filename, parse_settings(args.set))
    if not args.output:
        out, fmt = Path(f"{model.name}_graph.png"), "png"
    refuse_overwriting([("-o", out)], [("the model file", args.model)])
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
    from .posterior_files import load_posterior, read_vocab

    model = None
    if args.model:
        from .compiler import fitted_model, read_source

        model = fitted_model(*read_source(args.model))
    vocab = read_vocab(args.vocab) if args.vocab else None
    return load_posterior(args.posterior, model), vocab


def cmd_plot(args) -> int:
    from .files import write_bytes
    from .plots import FORMATS, plot_posterior
    from .posterior_files import load_points

    target = args.output or str(Path(args.posterior).with_suffix(".png"))
    out, fmt = _output(target, tuple(f".{f}" for f in FORMATS), "cemodel plot")
    refuse_overwriting([("-o", out)], [("the posterior", args.posterior), ("--model", args.model),
                                       ("--data", args.data), ("--vocab", args.vocab)])
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
    from .posterior_files import load_posterior
    from .predictive import Posterior, sample_posterior_predictive

    out, _ = _output(args.output or f"{Path(args.model).stem}_predictive.npz", (".npz",),
                     "cemodel predict")
    refuse_overwriting([("-o", out)], [("the model file", args.model), ("the fit", args.fit),
                                       ("the data", args.data)])
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
    from .posterior_files import summarize

    post, vocab = _posterior(args)
    with np.errstate(all="ignore"):  # an edited posterior's 1e308: inf in the report
        print(summarize(post, vocab, args.top), end="")
        table = intervals.rows(intervals.file_factors(post.variables, post.model,
                                                      post.blocks), args.prob)
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
    args = build_parser().parse_args(argv)
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
