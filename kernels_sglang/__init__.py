"""The SGLang kernel suite: per kernel a spec, a float64 reference, a faithful baseline and a template.

Facts about each kernel come from docs/kernels.md; the code is written from that
description, not copied. `suite.load(name)` returns a folder; FORMAT.md documents the template
format that baseline.cu and template.cu share.
"""
