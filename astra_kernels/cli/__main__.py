"""`python -m astra_kernels.cli`: the `astra` command."""

from astra_kernels.cli import main

raise SystemExit(main())
