#pragma once
// bfloat16 rounding on the host, for the CPU backend's MatmulPrecision::Bf16 table
// (cpu_bf16_matmul_ops(), kernels/ops.h) and for tests.
namespace azr::kernels {

// x rounded to the nearest bfloat16 (ties to even), returned as the fp32 of the same value: the
// low 16 bits of the result are zero. Infinities stay, a NaN stays a (quiet) NaN, and a finite
// value past bf16's largest rounds to infinity, as CUDA's __float2bfloat16_rn does.
float round_to_bf16(float x);

}  // namespace azr::kernels
