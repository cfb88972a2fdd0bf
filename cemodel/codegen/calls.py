"""Calls of a module's kernels from its plain Python (``_prepare``, the drivers' glue).

Every kernel is a ``Function`` that knows its parameters; ``KernelCalls`` holds them by kernel
name, built once the kernels are printed, so a call reads each argument from the fit state
``s`` by the same name, except the few a caller supplies itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .pycode import Function, Line


@dataclass(frozen=True)
class KernelCalls:
    """The module's kernels by name -> their parameters, and those a caller supplies itself
    (``items``, ``data_scale``, ``expect``, ...: ``ArgRecorder.supply``)."""

    params: Mapping[str, tuple[str, ...]]
    supplied: Mapping[str, frozenset[str]]

    @staticmethod
    def of(kernels: list[Function]) -> KernelCalls:
        return KernelCalls({fn.name: fn.args for fn in kernels},
                           {fn.name: frozenset(fn.supplied) for fn in kernels})

    def call(self, kernel: str, overrides: Mapping[str, str], result: str | None = None,
             prefix: str = "s.") -> Line:
        """``kernel(...)`` with each argument from ``overrides``, else the caller's own of
        those it supplies (``expect``: True), else ``prefix + name`` (the state's)."""
        call_args = []
        for a in self.params[kernel]:
            if a in overrides:
                call_args.append(overrides[a])
            elif a not in self.supplied[kernel]:
                call_args.append(prefix + a)
            else:
                call_args.append("True" if a == "expect" else a)
        text = f"{kernel}({', '.join(call_args)})"
        return Line(f"{result} = {text}" if result else text)

    def state_names(self, kernels: tuple[str, ...]) -> list[str]:
        """Every name these kernels read from the state, in first-use order."""
        names: list[str] = []
        for kernel in kernels:
            for a in self.params.get(kernel, ()):
                if a not in names and a not in self.supplied.get(kernel, ()):
                    names.append(a)
        return names
