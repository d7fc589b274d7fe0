"""The engine: compiling, launching, measuring and searching CUDA kernels, knowing nothing of
kernel suites, agents or the command line.

    toolchain/   NVRTC, the compile cache and worker, the device, timing, ceilings, PDL, interop
    measuring/   problems, correctness, guards, the measuring protocol, the fault-isolating worker,
                 replay of recordings, the results store, probes and the sanitizer
    templating/  the template language: parameters, restrictions, expressions and their C++ form
    search/      hardware limits, the search space, strategies, the runner and between-round plans

Imports point one way: toolchain <- measuring, templating <- search (errors.py under all of them).
"""
