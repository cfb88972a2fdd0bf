"""`cemodel compile | check | fit`: the command line.

A user's mistake prints a located message and exits with status 2; no
traceback, and no output file is left behind.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np

from . import __version__
from .errors import CemError, CemInternalError

EPILOG = """examples:
  cemodel check stdlib_models/lda.cem
  cemodel compile stdlib_models/lda.cem -o lda_vi.py --set K=50
  cemodel fit stdlib_models/gmm.cem --data points.npz --set K=5 -o posterior.npz
"""


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

    p = sub.add_parser("check", help="print each variable's complete conditional and the "
                       "methods that apply", epilog="example: cemodel check lda.cem")
    common(p)
    p = sub.add_parser("compile", help="write the generated Python module",
                       epilog="example: cemodel compile lda.cem -o lda_vi.py --set K=50")
    common(p)
    p.add_argument("-o", "--output", help="output .py file (default: MODEL_mf.py)")
    p.add_argument("--method", default="mf", choices=["mf"])
    p = sub.add_parser("fit", help="compile (cached), load data, fit, write the posterior",
                       epilog="example: cemodel fit lda.cem --data corpus.npz -o post.npz")
    common(p)
    p.add_argument("--data", required=True, help=".npz, .npy, .csv, .mtx or UCI docword file")
    p.add_argument("--method", default="mf", choices=["mf", "svi", "svi+", "ssvi-a", "ssvi"],
                   help="mf: batch coordinate ascent; svi: stochastic VI over the data plate; "
                   "svi+: SVI with tuneable annealing (needs --effective-batch-size); ssvi-a, "
                   "ssvi: structured SVI (Hoffman & Blei 2015), globals sampled in the local "
                   "step, ssvi with the V(β, λ) correction")
    p.add_argument("--local", default="mf", choices=["mf", "exact", "gibbs", "cvb0"],
                   help="the local step (E-step): mean field, the exact conditional, Gibbs "
                   "sampling or CVB0 with local proportions integrated out (see cemodel check)")
    p.add_argument("--gibbs-sweeps", type=int, default=10, help="gibbs: sweeps per item")
    p.add_argument("--gibbs-burn-in", type=int, default=5,
                   help="gibbs: sweeps discarded before averaging")
    p.add_argument("--ramp", action="store_true",
                   help="svi: grow N over the first epoch as items are seen (SSVI §2.6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-iter", type=int, default=200, help="mf: iterations at most")
    p.add_argument("--tol", type=float, default=1e-6,
                   help="mf: stop when the relative change of the ELBO is below this")
    p.add_argument("--epochs", type=int, default=10, help="svi: passes over the data")
    p.add_argument("--batch-size", type=int, default=256, help="svi: minibatch size |S|")
    p.add_argument("--kappa", type=float, default=0.7, help="svi: step size (t + tau)^-kappa")
    p.add_argument("--tau", type=float, default=10.0, help="svi: step size delay")
    p.add_argument("--step-scale", type=float, default=1.0, help="svi: step size scale s")
    p.add_argument("--effective-batch-size", type=float, default=None,
                   help="svi+: the effective batch size M <= |S|")
    p.add_argument("--learn", default=None, metavar="HYPER,...",
                   help="hyperparameters to set by empirical Bayes (e.g. alpha,eta); "
                   "stochastic methods take a step towards the batch's value each step")
    p.add_argument("-o", "--output", help="posterior .npz (default: MODEL_posterior.npz)")
    p.add_argument("--quiet", action="store_true", help="no per-iteration progress")
    return parser


def _stages(args):
    from .compiler import parse_settings, read_source, run_stages

    text, filename = read_source(args.model)
    return run_stages(text, filename, parse_settings(args.set))


def cmd_check(args) -> int:
    from .check import check_report

    print(check_report(_stages(args).plan))
    return 0


def cmd_compile(args) -> int:
    from .compiler import generate, write_atomic

    stages = _stages(args)
    source = generate(stages, args.method)
    out = Path(args.output or f"{stages.model.name}_{args.method}.py")
    write_atomic(out, source)
    print(f"wrote {out}")
    return 0


def cmd_fit(args) -> int:
    from .compiler import compile_stages, parse_settings, write_atomic_bytes
    from .data import load_data

    stages = _stages(args)
    why = dict(stages.plan.methods)[args.method]
    if not why.startswith("yes"):
        raise CemError(f"--method {args.method} does not apply to this model: "
                       f"{why.removeprefix('no: ')}")
    why = dict(stages.plan.local_steps)[args.local]
    if not why.startswith("yes"):
        raise CemError(f"--local {args.local} does not apply to this model: "
                       f"{why.removeprefix('no: ')}")
    if args.method == "svi+" and args.effective_batch_size is None:
        raise CemError("--method svi+ needs --effective-batch-size M (M < --batch-size)")
    module = compile_stages(stages, "mf")
    data = load_data(args.data, module.SPEC)
    # a dimension given with --set is the user's: a conflict with the data names --set
    settings = parse_settings(args.set)
    dims = {d.name: d.default for d in stages.model.dims if d.name in settings}
    out = Path(args.output or f"{stages.model.name}_posterior.npz")

    def progress(iteration: int, elbo: float, seconds: float) -> None:
        if not args.quiet:
            unit = "iter" if args.method == "mf" else "epoch"
            print(f"{unit} {iteration + 1:4d}  elbo {elbo: .6e}  {seconds:8.2f} s", flush=True)

    extra: dict = {"learn": args.learn} if args.learn else {}
    if args.learn and not getattr(module, "LEARNABLE", ()):
        raise CemError("--learn: this model has no hyperparameter empirical Bayes can set")
    if stages.model.data_plate is not None:
        extra["local"] = args.local
    if args.local == "gibbs":
        extra.update(gibbs_sweeps=args.gibbs_sweeps, gibbs_burn_in=args.gibbs_burn_in)
    if args.method == "mf":
        result = module.fit(data, dims=dims, max_iter=args.max_iter, tol=args.tol,
                            seed=args.seed, callback=progress, **extra)
        status = "converged" if result.converged else "stopped at --max-iter"
        done = f"{status} after {result.iterations} iterations"
    else:
        fit = {"ssvi-a": module.fit_ssvi_a, "ssvi": getattr(module, "fit_ssvi", None)}.get(
            args.method, module.fit_svi)
        result = fit(
            data, dims=dims, epochs=args.epochs, batch_size=args.batch_size, kappa=args.kappa,
            tau=args.tau, step_scale=args.step_scale, seed=args.seed, callback=progress,
            effective_batch_size=args.effective_batch_size if args.method == "svi+" else None,
            ramp=args.ramp, **extra)
        done = f"{args.method} ({args.local} local step): {result.iterations} epochs"
    print(f"{done}, {result.seconds:.2f} s; ELBO {result.elbo[-1]:.6e}")
    if args.learn:
        learned = ", ".join(f"{k} = {v:.6g}" for k, v in result.hypers.items()
                            if k in args.learn.split(","))
        print(f"learned: {learned}")
    buffer = io.BytesIO()
    arrays = {k.replace("[", "(").replace("]", ")"): np.asarray(v)
              for k, v in result.posterior.items()}
    np.savez(buffer, elbo=result.elbo, **arrays)
    write_atomic_bytes(out, buffer.getvalue())
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {"check": cmd_check, "compile": cmd_compile, "fit": cmd_fit}[args.command]
    try:
        return handler(args)
    except CemError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    except CemInternalError as exc:
        print(f"internal error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
