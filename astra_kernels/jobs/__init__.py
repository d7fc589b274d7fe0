"""The jobs a user runs on the suite: check, tune, bench (with its PyTorch peers), report (with
its charts) and export. Each is a module the CLI command of the same name calls."""
