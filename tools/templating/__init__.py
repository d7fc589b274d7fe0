"""The template language of baseline.cu and template.cu (kernels_sglang/FORMAT.md): parameters,
restrictions and derived defines, their expressions, and the expressions' C++ form for export."""
