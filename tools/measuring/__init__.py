"""Measuring a kernel: the problem it solves, correctness against a float64 reference, guards
around its buffers, the measuring protocol, the worker process that isolates faults, replay of
recorded measurements, the results store, probes of the GPU's floors and the sanitizer."""
