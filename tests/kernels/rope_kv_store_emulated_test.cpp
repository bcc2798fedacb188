// The CUDA kernel that rotates a decode step's q and k and stores k and v into the bf16 cache in
// one launch (kernels/cuda/rope_kv_store.cuh), run on the CPU through tests/kernels/cuda_emulation.h:
// against the CPU table's ops it replaces, rope_forward on q and k and kv_store_w16 (the same
// expressions, so the same bits): every q value, every cache entry the step writes, and every
// other entry left as it was. Grids smaller than the work too, so the grid-stride loop wraps. What
// the emulation cannot show (speed, the launch on a device) is for CudaOps.RopeKvStoreIsTheUnfusedOpsBitForBit.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/rope_kv_store.cuh"

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

TEST(RopeKvStoreEmulated, IsRopeAndTheCacheStoreBitForBit) {
  for (const Case c : {Case{1, 4, 2, 8, 1, 32}, Case{3, 6, 2, 16, 2, 64}, Case{12, 4, 4, 4, 3, 32},
                       Case{10, 2, 1, 32, 64, 256}}) {
    SCOPED_TRACE("R " + std::to_string(c.R) + " heads " + std::to_string(c.heads) + "/" +
                 std::to_string(c.kv_heads) + " d " + std::to_string(c.d) + " grid " + std::to_string(c.blocks));
    constexpr int64_t kSlots = 16, kCapacity = 20;
    const int64_t qd = c.heads * c.d, kd = c.kv_heads * c.d, stride = kCapacity * kd;
    std::vector<float> cos, sin;
    rope_tables(kCapacity, c.d, cos, sin);
    const std::vector<float> q0 = randn(size_t(c.R * qd), 1), k = randn(size_t(c.R * kd), 2),
                             v = randn(size_t(c.R * kd), 3);
    const std::vector<uint16_t> cache0 = bf16_bits(randn(size_t(kSlots * stride), 4));
    std::vector<int32_t> slot(size_t(c.R)), pos(size_t(c.R));
    for (int64_t r = 0; r < c.R; r++) slot[size_t(r)] = int32_t((5 * r + 3) % kSlots), pos[size_t(r)] = int32_t((7 * r + 1) % kCapacity);

    std::vector<float> q = q0, q_ref = q0;
    std::vector<uint16_t> kc = cache0, vc = cache0, kc_ref = cache0, vc_ref = cache0;
    cpu_bf16_matmul_ops().rope_kv_store_w16(q_ref.data(), k.data(), v.data(), pos.data(), cos.data(), sin.data(),
                                            slot.data(), kc_ref.data(), vc_ref.data(), c.R, c.heads, c.kv_heads, c.d,
                                            stride);
    const std::vector<float> k_before = k;
    const RopeKvStoreArgs a{q.data(), k.data(), v.data(), pos.data(), slot.data(), cos.data(), sin.data(),
                            reinterpret_cast<__nv_bfloat16*>(kc.data()), reinterpret_cast<__nv_bfloat16*>(vc.data()),
                            c.R, c.heads, c.kv_heads, c.d, stride};
    emu::launch({c.blocks, 1, 1}, c.threads, 0, rope_kv_store_kernel, a);
    EXPECT_EQ(std::memcmp(q.data(), q_ref.data(), q.size() * sizeof(float)), 0) << "q";
    EXPECT_EQ(kc, kc_ref) << "k cache";
    EXPECT_EQ(vc, vc_ref) << "v cache";
    EXPECT_EQ(k, k_before) << "k is read, not written";
    // The step wrote: every row's q rotated (some value moved) and its cache entries.
    size_t changed = 0;
    for (size_t i = 0; i < kc.size(); i++) changed += kc[i] != cache0[i];
    EXPECT_GE(changed, size_t(c.R * kd) * 9 / 10) << "the k cache was not written";
  }
}

}  // namespace
}  // namespace azr::kernels::cuda_detail
