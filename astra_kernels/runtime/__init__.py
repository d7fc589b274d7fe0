"""What generated launchers import at run time: the dispatch table, the tuned kernel that
`astra tune`'s launcher.py loads, and the callable that an exported `<kernel>_launch.py` loads.
Their import paths are kept stable; old ones (astra_kernels.kernels_sglang.*) are shims."""
