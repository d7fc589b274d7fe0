"""astra-kernels: prove SGLang's CUDA kernels correct, measure them honestly, make them faster.

The repository keeps the design's folders at its top level (tools/, kernels_sglang/, nodes/,
graph/); pyproject.toml installs each as a subpackage of this namespace, so `astra_kernels.tools`
is the folder tools/. This folder holds the application layer (defaults, evaluators, the jobs,
the run-time of tuned kernels) and the command line; the README's layer table says what is where.
"""

import os as _os

__version__ = "0.1.0"

# Imported from a source checkout rather than an install (the checkout's folder first on sys.path:
# a Ray worker puts its driver's working directory there, `python -m` from the checkout's root),
# this folder alone would lack the subpackages the install maps in; they are the checkout's
# top-level folders of the same names, so the checkout's root is searched for them too.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_checkout, "pyproject.toml")) and all(
        _os.path.isfile(_os.path.join(_checkout, name, "__init__.py")) for name in ("tools", "kernels_sglang")):
    __path__.append(_checkout)
