"""Kept for launchers written by earlier versions: the dispatch table is astra_kernels.runtime.dispatch."""

from astra_kernels.runtime.dispatch import DispatchEntry, DispatchTable, Pick

__all__ = ["DispatchEntry", "DispatchTable", "Pick"]
