"""The kernel emitters: plain functions from an EmitContext to numba kernels (Function)."""
