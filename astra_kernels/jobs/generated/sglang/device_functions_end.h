// Written by `astra import-sglang`: the end of what device_functions_begin.h starts.
#pragma pop_macro("__launch_bounds__")
#pragma pop_macro("__grid_constant__")
#pragma pop_macro("__global__")
