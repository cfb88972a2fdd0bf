"""Stage 5: InferencePlan -> the generated module (the model's kernels and interface).

    lower(plan) -> KernelPlan        every decision, before printing (lowering.py)
    emit_kernels(EmitContext)        one numba kernel per update (kernels/)
    prepare, posterior, interface    _prepare, _result/_learn, the drivers' glue
    module.generate(plan) -> str     the sections in order, printed (pycode.py)

The fitting algorithms are not generated: they are cemodel.runtime.drivers.
"""

from .module import GeneratedModule, generate, generated_module

__all__ = ["GeneratedModule", "generate", "generated_module"]
