"""What generated launchers import at run time: the dispatch table, the tuned kernel that
`astra tune`'s launcher.py loads, and the callable that an exported `<kernel>_launch.py` loads.
Their import paths are kept stable. The paths of launchers written before 2026-11-28
(astra_kernels.kernels_sglang.{dispatch,launcher,exported}) are gone: no shims; export again."""
