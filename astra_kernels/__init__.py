"""astra-kernels: prove SGLang's CUDA kernels correct, measure them honestly, make them faster.

The repository keeps the design's folders at its top level (tools/, kernels_sglang/, nodes/,
graph/); pyproject.toml installs each as a subpackage of this namespace, so `astra_kernels.tools`
is the folder tools/. This folder holds the application layer (defaults, evaluators, the jobs,
the run-time of tuned kernels) and the command line; the README's layer table says what is where.
"""

__version__ = "0.1.0"
