// The warp-level tensor-core instructions whose register layouts PTX documents (PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type" and "ldmatrix"), for kernels that
// need to touch the accumulators element by element, which WMMA's opaque fragments forbid: a
// softmax kept in registers, a rescaled accumulator.
//
// The layouts, with g = lane / 4 and t = lane % 4 (each register holds two bf16, the lower column
// or row in the low 16 bits):
// - A, 16 x 16 row-major, 4 registers: a[0] = (row g, cols 2t, 2t+1), a[1] = (row g+8, cols 2t,
//   2t+1), a[2] = (row g, cols 2t+8, 2t+9), a[3] = (row g+8, cols 2t+8, 2t+9).
// - B, 16 x 8 (k x n), 2 registers: b0 = (k 2t, 2t+1; col g), b1 = (k 2t+8, 2t+9; col g).
// - C/D, 16 x 8 fp32, 4 registers: c[0], c[1] = (row g, cols 2t, 2t+1); c[2], c[3] = (row g+8,
//   cols 2t, 2t+1).
// - ldmatrix .x4 reads four 8 x 8 bf16 matrices from shared memory: lanes 8i .. 8i+7 give the
//   addresses of matrix i's 8 rows (16 contiguous bytes each, 16-byte aligned), and register i of
//   lane l gets matrix i's (row g, cols 2t, 2t+1); with .trans, (rows 2t, 2t+1; col g), that is,
//   row g of the transposed matrix.
// So two adjacent 16 x 8 C tiles are, once rounded and packed, the A fragment of a 16 x 16
// product: FlashAttention-2's way of feeding the probabilities to P V without shared memory.
//
// And cp.async (sm_80): a 16-byte copy from global to shared memory that runs while the thread
// goes on, zero-filled where the source is not valid; commit closes this thread's group of copies
// so far, wait<N> waits until at most N of its groups are still in flight. A block still needs
// __syncthreads after the wait to see the other threads' copies.
//
// tests/kernels/cuda_emulation.h defines the same functions for the CPU stand-in of the device,
// lane by lane from the layouts above (MmaSyncEmulation.* checks that they compose into matrix
// products); on a GPU, the attention test of the kernels that use them (CudaTensorCoreAttention
// with the Mma choice) holds that reading of the documentation against the hardware.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_or_emulation.cuh"

namespace azr::kernels::cuda_detail::mma {

#ifndef AZR_CUDA_EMULATION
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* row) {
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// d += a b: bf16 operands, exact products, fp32 sums.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// bf16(lo) in the low half, bf16(hi) in the high half, both rounded to nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// src must be a valid global address even when !valid (no byte of it is read then).
__device__ __forceinline__ void cp_async16(__nv_bfloat16* dst, const __nv_bfloat16* src, bool valid) {
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif

}  // namespace azr::kernels::cuda_detail::mma
