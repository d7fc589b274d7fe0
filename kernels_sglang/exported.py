"""Kept for `<kernel>_launch.py` files written by earlier versions of `astra export`: the exported
callable is astra_kernels.runtime.exported_kernel."""

from astra_kernels.runtime.exported_kernel import ExportedKernel, load_callable

__all__ = ["ExportedKernel", "load_callable"]
