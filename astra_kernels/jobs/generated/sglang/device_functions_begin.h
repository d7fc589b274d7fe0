// Written by `astra import-sglang`. SGLang launches its JIT kernels from C++ (TVM-FFI), passing a
// parameter struct; this project launches one extern "C" entry point with the kernel spec's
// arguments. So between this header and device_functions_end.h, SGLang's own source is compiled
// unchanged with its __global__ kernels declared __device__ (and the two attributes that only a
// __global__ takes dropped): the entry point in baseline.cu builds SGLang's parameters and calls
// the kernel SGLang's host code would have launched, at SGLang's launch geometry (its //@ lines).
#pragma push_macro("__global__")
#pragma push_macro("__grid_constant__")
#pragma push_macro("__launch_bounds__")
#undef __global__
#define __global__ __device__
#undef __grid_constant__
#define __grid_constant__
#undef __launch_bounds__
#define __launch_bounds__(...)
