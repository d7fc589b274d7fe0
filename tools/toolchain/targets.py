"""The GPU assumed where none is present or named, and the CUDA rule on static shared memory.

The suite is tuned for the H100 and H200 (sm_90, 132 multiprocessors); compiling on a machine
without a GPU, exporting for one, and the shape-dependent launch rules (CTAs per SM) use these.
The device's own figures replace them wherever a device is present.
"""

DEFAULT_ARCH = "sm_90"
DEFAULT_SMS = 132  # multiprocessors of an H100 SXM and of an H200

# A kernel may use this much shared memory without asking; more needs
# cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) before its launch (CUDA programming guide).
STATIC_SHARED_LIMIT = 48 * 1024
