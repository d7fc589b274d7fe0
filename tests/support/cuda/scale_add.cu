// out = x * alpha + y, fp32: the kernel the tests give `astra new --from`
extern "C" __global__ void scale_add(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * alpha + y[i];
}
