"""Calls of a module's kernels from its plain Python (``_prepare``, the drivers' glue).

Every kernel is a ``Function`` that knows its parameters; ``KernelCalls`` holds them by kernel
name, built once the kernels are printed, so a call reads each argument from the fit state
``s`` by the same name, except the few a caller supplies itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .pycode import Function, Line, Shares


@dataclass(frozen=True)
class KernelCalls:
    """The module's kernels by name -> their parameters, and those a caller supplies itself
    (``items``, ``data_scale``, ``expect``, ...: ``ArgRecorder.supply``)."""

    params: Mapping[str, tuple[str, ...]]
    supplied: Mapping[str, frozenset[str]]
    shares: Mapping[str, Shares]  # the kernels run in shares of their items

    @staticmethod
    def of(kernels: list[Function]) -> KernelCalls:
        return KernelCalls({fn.name: fn.args for fn in kernels},
                           {fn.name: frozenset(fn.supplied) for fn in kernels},
                           {fn.name: fn.shares for fn in kernels if fn.shares is not None})

    def call(self, kernel: str, overrides: Mapping[str, str], result: str | None = None,
             prefix: str = "s.") -> Line:
        """``kernel(...)`` with each argument from ``overrides``, else the caller's own of
        those it supplies (``expect``: True), else ``prefix + name`` (the state's)."""
        assert kernel not in self.shares, f"{kernel} runs in shares: KernelCalls.run"
        text = f"{kernel}({', '.join(self._arguments(kernel, overrides, prefix))})"
        return Line(f"{result} = {text}" if result else text)

    def run(self, kernel: str, overrides: Mapping[str, str], result: str | None = None,
            prefix: str = "s.") -> list[Line]:
        """A kernel over items, in shares (``rt.run_shares``): the messages it reads
        hoisted first, then every share, then the accumulators summed over the shares.
        The last line is the call, ``result =`` its value (the sum over the shares)."""
        shares = self.shares[kernel]
        lines = [self.call(shares.hoist, overrides, prefix=prefix)] if shares.hoist else []
        count = (f"{prefix}{shares.count}.shape[0]" if shares.count
                 else f"rt.share_count({prefix}bound)")
        arguments = "".join(f"{a}, " for a in self._arguments(kernel, overrides, prefix)[3:])
        sums = "".join(f"({prefix}{a}, {prefix}{a}_threads), " for a in shares.sums)
        text = f"rt.run_shares({kernel}, {count}, ({arguments.rstrip(' ')}), ({sums.rstrip(' ')}))"
        return [*lines, Line(f"{result} = {text}" if result else text)]

    def _arguments(self, kernel: str, overrides: Mapping[str, str], prefix: str) -> list[str]:
        call_args = []
        for a in self.params[kernel]:
            if a in overrides:
                call_args.append(overrides[a])
            elif a not in self.supplied[kernel]:
                call_args.append(prefix + a)
            else:
                call_args.append("True" if a == "expect" else a)
        return call_args

    def state_names(self, kernels: tuple[str, ...]) -> list[str]:
        """Every name these kernels read from the state, in first-use order (a kernel run
        in shares: its hoisted messages' and the accumulators it sums, too)."""
        names: list[str] = []
        for kernel in kernels:
            shares = self.shares.get(kernel)
            if shares is not None and shares.hoist:
                names += self.state_names((shares.hoist,))
            for a in self.params.get(kernel, ()):
                if a not in self.supplied.get(kernel, ()):
                    names.append(a)
            names += shares.sums if shares is not None else ()
        return list(dict.fromkeys(names))
