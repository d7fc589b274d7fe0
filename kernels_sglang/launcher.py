"""Kept for launcher.py files written by earlier versions of `astra tune`: the tuned kernel is
astra_kernels.runtime.tuned_kernel."""

from astra_kernels.runtime.tuned_kernel import LaunchPlan, TunedKernel

__all__ = ["LaunchPlan", "TunedKernel"]
