"""The application's defaults, each defined once: the CLI's options, the agent's RunContext and the
jobs read them from here, so that a default cannot differ between `astra tune`, `astra optimize`
and a notebook.
"""

# One kernel timed in two processes differs by up to ~1% at large shapes (H200, 2026-11-24:
# fused_add_rmsnorm 16384x8192 won its search by 0.02% and came out 1% slower in the benchmark).
# A difference under this is never read as faster or slower: the dispatch table keeps the
# baseline unless a configuration beats it by more, the agent accepts a candidate only if it beats
# the best by more, and the bench and the report call a smaller difference level.
TIMING_NOISE = 0.01

TUNE_SECONDS = 100.0  # search time per kernel (or per tune action of the agent), shared by its shapes
