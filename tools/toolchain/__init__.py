"""The CUDA toolchain: NVRTC compiles (in a child process, behind a cache), the driver and device,
graph-replay timing, bandwidth ceilings, programmatic dependent launch and tensor interop."""
