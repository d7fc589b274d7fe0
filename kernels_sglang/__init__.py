"""The SGLang kernel suite's data: per kernel a folder with a spec, a float64 reference, a faithful
baseline and a template; common.cuh, FORMAT.md, the shipped tuned tables (tuned/) and recordings
(recorded/). Facts about each kernel come from docs/kernels.md; the code is written from that
description, not copied. The code that loads these folders is astra_kernels.suite
(`suite.load(name)` returns a folder); FORMAT.md documents the format.
"""
