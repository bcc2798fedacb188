// The CUDA kernels that follow a many-row decode step's two fused GEMMs (kernels/cuda/decode_epilogues.cuh),
// run on the CPU through tests/kernels/cuda_emulation.h, against the CPU table's ops they replace
// on the same values (the same expressions, so the same bits): rope_kv_store_kernel against
// rope_forward on q and k and kv_store_w16 (every q value, every cache entry written, every other
// entry left as it was, the GEMM output not written). Grids smaller than the work too, so the
// grid-stride loops wrap. (SwiGLU on the rows of [gate | up]: swiglu_emulated_test.cpp.) What the
// emulation cannot show (speed, the launch on a device) is for
// CudaOps.DecodeEpiloguesAreTheUnfusedOpsBitForBit.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/decode_epilogues.cuh"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/gemv_cases.h"
#include "tests/kernels/random_inputs.h"

namespace azr::kernels::cuda_detail {
namespace {

using namespace azr::kernels::testing;

struct Case {
  int64_t R, heads, kv_heads, d;
  unsigned blocks, threads;
};

TEST(DecodeEpiloguesEmulated, RopeKvStoreIsRopeAndTheCacheStoreBitForBit) {
  for (const Case c : {Case{1, 4, 2, 8, 1, 32}, Case{3, 6, 2, 16, 2, 64}, Case{12, 4, 4, 4, 3, 32},
                       Case{10, 2, 1, 32, 64, 256}}) {
    SCOPED_TRACE("R " + std::to_string(c.R) + " heads " + std::to_string(c.heads) + "/" +
                 std::to_string(c.kv_heads) + " d " + std::to_string(c.d) + " grid " + std::to_string(c.blocks));
    constexpr int64_t kSlots = 16, kCapacity = 20;
    const int64_t qd = c.heads * c.d, kd = c.kv_heads * c.d, width = qd + 2 * kd, stride = kCapacity * kd;
    std::vector<float> cos, sin;
    rope_tables(kCapacity, c.d, cos, sin);
    const std::vector<float> qkv = randn(size_t(c.R * width), 1);
    const std::vector<uint16_t> cache0 = bf16_bits(randn(size_t(kSlots * stride), 4));
    std::vector<int32_t> slot(size_t(c.R)), pos(size_t(c.R));
    for (int64_t r = 0; r < c.R; r++)
      slot[size_t(r)] = int32_t((5 * r + 3) % kSlots), pos[size_t(r)] = int32_t((7 * r + 1) % kCapacity);

    std::vector<float> q_ref(size_t(c.R * qd), NAN);
    std::vector<uint16_t> kc_ref = cache0, vc_ref = cache0;
    cpu_bf16_matmul_ops().rope_kv_store_w16(q_ref.data(), qkv.data(), pos.data(), cos.data(), sin.data(), slot.data(),
                                            kc_ref.data(), vc_ref.data(), c.R, c.heads, c.kv_heads, c.d, stride);
    for (const bool wide : {false, true}) {  // 32-bit and 64-bit item indices
      SCOPED_TRACE(wide ? "64-bit indices" : "32-bit indices");
      std::vector<float> q(size_t(c.R * qd), NAN), qkv_in = qkv;
      std::vector<uint16_t> kc = cache0, vc = cache0;
      const RopeKvStoreArgs a{q.data(), qkv_in.data(), pos.data(), slot.data(), cos.data(), sin.data(),
                              reinterpret_cast<__nv_bfloat16*>(kc.data()), reinterpret_cast<__nv_bfloat16*>(vc.data()),
                              c.R, c.heads, c.kv_heads, c.d, stride};
      if (wide)
        emu::launch({c.blocks, 1, 1}, c.threads, 0, rope_kv_store_kernel<int64_t>, a);
      else
        emu::launch({c.blocks, 1, 1}, c.threads, 0, rope_kv_store_kernel<uint32_t>, a);
      EXPECT_EQ(std::memcmp(q.data(), q_ref.data(), q.size() * sizeof(float)), 0) << "q";
      EXPECT_EQ(kc, kc_ref) << "k cache";
      EXPECT_EQ(vc, vc_ref) << "v cache";
      EXPECT_EQ(qkv_in, qkv) << "the GEMM output is read, not written";
      size_t changed = 0;
      for (size_t i = 0; i < kc.size(); i++) changed += kc[i] != cache0[i];
      EXPECT_GE(changed, size_t(c.R * kd) * 9 / 10) << "the k cache was not written";
    }
  }
  EXPECT_TRUE(fits_32_bit_index(int64_t(1) << 31));
  EXPECT_FALSE(fits_32_bit_index((int64_t(1) << 31) + 1));
}

}  // namespace
}  // namespace azr::kernels::cuda_detail
