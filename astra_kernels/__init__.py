"""astra-kernels: prove SGLang's CUDA kernels correct, measure them honestly, make them faster.

The repository keeps the design card's folders at its top level (tools/, and later graph/,
nodes/, kernels_sglang/); pyproject.toml installs each as a subpackage of this namespace, so
`astra_kernels.tools` is the folder tools/. This package itself holds only the command line.
"""

__version__ = "0.1.0"
