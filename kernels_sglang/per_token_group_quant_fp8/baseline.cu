// per_token_group_quant_fp8 as SGLang's sgl-kernel runs it (kernels.md section 7; the version with
// 16 threads per group): groups of 128 contiguous elements, 16 threads per group, G groups per CTA
// with G the largest of 16, 8, 4, 2, 1 dividing the total group count (so no CTA has a partial
// group and there are no bounds checks; a CTA of one group is a half warp), grid = groups / G.
// Each thread does one 16-byte load per pass (128 / 8 = 16 vectors for 16 threads); the group's
// absmax, starting from eps, is reduced with half-warp shfl_xor (8, 4, 2, 1); lane 0 writes
// s = absmax / 448; the second pass re-reads x from global memory and writes q one byte per
// element: clamp(x / s, -448, 448) converted as c10::Float8_e4m3fn does it, in software
// (round to nearest even, bit arithmetic, no cvt instruction). Built with fast math and a
// 128-register cap like sgl-kernel's SM90 build. PDL is left off.
//
// Newer sgl-kernel releases replaced this with 8 threads per group, 32 bytes per thread, one
// load, the hardware cvt and one 16-byte store; the template covers that configuration.
#include "common.cuh"

//@ kernel: per_token_group_quant_fp8
//@ require H % 128 == 0                              -- the op is defined on whole groups of 128
//@ derive GPB = pow2_divisor(T * (H // 128), 16)     -- groups per CTA, as SGLang picks it
//@ grid: T * (H // 128) // GPB
//@ block: GPB * 16
//@ fast_math: 1
//@ max_registers: 128

#define GROUP 128
#define TPG 16                       // threads per group
#define VEC (16 / ELEM_BYTES)        // elements per 16-byte load
#define FP8_MAX 448.0f

// A 16-byte load the compiler cannot merge with the first pass's (the production kernel's group
// size is a run-time value, so its two passes are two loops whose loads are never combined).
__device__ __forceinline__ uint4 reload16(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(__cvta_generic_to_global(p)));
    return r;
}

// float -> fp8 e4m3fn bits, round to nearest even, done with integer and float arithmetic the way
// PyTorch's c10 type does it (values >= 480 become NaN; the caller has clamped to +-448).
__device__ __forceinline__ unsigned char e4m3_from_float_sw(float f) {
    unsigned int bits = __float_as_uint(f);
    const unsigned int sign = bits & 0x80000000u;
    bits ^= sign;
    unsigned int code;
    if (bits >= 0x43F00000u) {                  // |f| >= 480: no e4m3 value rounds there
        code = 0x7Fu;
    } else if (bits < (121u << 23)) {           // |f| < 2^-6: e4m3 subnormal (or zero)
        // Adding 2^14 puts the e4m3 subnormal step (2^-9) at the fp32 unit in the last place,
        // so the float add rounds to nearest even and the low bits are the code.
        const float shifted = __uint_as_float(bits) + __uint_as_float(141u << 23);
        code = __float_as_uint(shifted) - (141u << 23);
    } else {                                    // normal: rebias the exponent, round off 20 bits
        const unsigned int odd = (bits >> 20) & 1u;
        bits += 0xC407FFFFu + odd;              // ((7 - 127) << 23) + 0x7FFFF, plus the tie bit
        code = bits >> 20;
    }
    return (unsigned char)(code | (sign >> 24));
}

extern "C" __global__ void __launch_bounds__(256)
per_token_group_quant_fp8(const scalar_t* __restrict__ x, unsigned char* __restrict__ q,
                          float* __restrict__ scales, int tokens, int hidden, float eps) {
    typedef Vec<scalar_t, VEC> V;
    const int groups_per_block = blockDim.x / TPG;
    const int local_group = threadIdx.x / TPG;
    const int lane = threadIdx.x % TPG;
    const long long group = (long long)blockIdx.x * groups_per_block + local_group;
    const long long offset = group * GROUP;
    const scalar_t* in = x + offset;
    unsigned char* out = q + offset;

    float absmax = eps;
    for (int i = lane; i < GROUP / VEC; i += TPG) {
        const V v = reinterpret_cast<const V*>(in)[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j) absmax = fmaxf(absmax, fabsf(to_float(v.v[j])));
    }
    const unsigned int mask = (threadIdx.x & 16) ? 0xFFFF0000u : 0x0000FFFFu;  // this half warp
#pragma unroll
    for (int o = TPG / 2; o > 0; o >>= 1) absmax = fmaxf(absmax, __shfl_xor_sync(mask, absmax, o));

    const float s = absmax / FP8_MAX;
    if (lane == 0) scales[group] = s;

    for (int i = lane; i < GROUP / VEC; i += TPG) {
        const uint4 raw = reload16(in + i * VEC);
        const V v = *reinterpret_cast<const V*>(&raw);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float y = fminf(fmaxf(to_float(v.v[j]) / s, -FP8_MAX), FP8_MAX);
            out[i * VEC + j] = e4m3_from_float_sw(y);
        }
    }
}
