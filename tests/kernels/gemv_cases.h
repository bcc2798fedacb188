#pragma once
// Inputs and checks shared by the few-row decode kernels' tests: on the CPU emulation of the
// device (gemv_emulated_test.cpp) and on a GPU (cuda_ops_test.cpp, CudaGemv). The truth is the
// CPU Bf16 table's unfused ops (kernels/cpu/bf16_matmul.cpp) on the same inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/random_inputs.h"

namespace azr::kernels::testing {

inline std::vector<uint16_t> bf16_bits(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  cpu_bf16_matmul_ops().to_bf16(out.data(), x.data(), int64_t(x.size()));
  return out;
}

inline float bf16_value(uint16_t bits) {
  const uint32_t b = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// One bf16 step at the magnitude of x (2^-7 of it, rounded down to a power of two).
inline float bf16_step(float x) { return std::ldexp(1.f, std::ilogb(std::max(std::fabs(x), 1e-30f)) - 7); }

// got and want are bf16 outputs of the same values up to fp32 noise: each the same bf16 or its
// neighbour (a value within noise of a rounding boundary rounds the other way), at least
// `exact_share` of them identical. Entries equal to `before` in both are skipped (not written);
// returns how many were compared.
inline size_t expect_bf16_neighbours(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                                     const std::vector<uint16_t>* before, double exact_share, const char* what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  size_t compared = 0, exact = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); i++) {
    if (before && got[i] == (*before)[i] && want[i] == (*before)[i]) continue;
    compared++;
    exact += got[i] == want[i];
    if (!(std::fabs(bf16_value(got[i]) - bf16_value(want[i])) <= bf16_step(bf16_value(want[i])))) {
      ADD_FAILURE() << what << " " << i << ": " << bf16_value(got[i]) << " against " << bf16_value(want[i]);
      return compared;
    }
  }
  EXPECT_GE(double(exact), exact_share * double(compared)) << what << ": " << exact << " of " << compared << " exact";
  return compared;
}

// The RoPE tables as the model builds them (theta 10000), [positions, d/2].
inline void rope_tables(int64_t positions, int64_t d, std::vector<float>& cos, std::vector<float>& sin) {
  const int64_t half = d / 2;
  cos.resize(size_t(positions * half));
  sin.resize(size_t(positions * half));
  for (int64_t p = 0; p < positions; p++)
    for (int64_t i = 0; i < half; i++) {
      const double a = double(p) * std::pow(10000.0, -2.0 * double(i) / double(d));
      cos[size_t(p * half + i)] = float(std::cos(a));
      sin[size_t(p * half + i)] = float(std::sin(a));
    }
}

struct QkvCase {
  int R;
  int64_t H, heads, kv_heads, d;
  bool bias;
};

// A decode_qkv_w16 call's host inputs, and the CPU table's results on them (q_ref, k_ref, v_ref:
// the caches after the store; cache0 before it).
struct QkvInputs {
  static constexpr int64_t kSlots = 8, kCapacity = 12;
  QkvCase c;
  int64_t qd, kd, stride;
  std::vector<uint16_t> x16, wq, wk, wv, cache0, k_ref, v_ref;
  std::vector<float> bq, bk, bv, cos, sin, q_ref;
  std::vector<int32_t> slot, pos;

  explicit QkvInputs(const QkvCase& cs) : c(cs) {
    qd = c.heads * c.d, kd = c.kv_heads * c.d, stride = kCapacity * kd;
    x16 = bf16_bits(randn(size_t(c.R * c.H), uint64_t(10 + c.H)));
    wq = bf16_bits(randn(size_t(qd * c.H), 11, 0.3f));
    wk = bf16_bits(randn(size_t(kd * c.H), 12, 0.3f));
    wv = bf16_bits(randn(size_t(kd * c.H), 13, 0.3f));
    bq = randn(size_t(qd), 14), bk = randn(size_t(kd), 15), bv = randn(size_t(kd), 16);
    rope_tables(kCapacity, c.d, cos, sin);
    slot.resize(size_t(c.R));
    pos.resize(size_t(c.R));
    for (int r = 0; r < c.R; r++) slot[size_t(r)] = int32_t((3 * r + 1) % kSlots), pos[size_t(r)] = (5 * r + 2) % 11;
    cache0 = bf16_bits(randn(size_t(kSlots * stride), 17));
    q_ref.assign(size_t(c.R * qd), 0.f);
    k_ref = cache0, v_ref = cache0;
    DecodeQkv ref = args(q_ref.data(), k_ref.data(), v_ref.data());
    cpu_bf16_matmul_ops().decode_qkv_w16(ref);
  }

  // The call on these inputs (host pointers) writing to q and the caches given.
  DecodeQkv args(float* q, uint16_t* kcache, uint16_t* vcache) const {
    DecodeQkv a;
    a.x16 = x16.data();
    a.wq = wq.data(), a.wk = wk.data(), a.wv = wv.data();
    if (c.bias) a.bq = bq.data(), a.bk = bk.data(), a.bv = bv.data();
    a.cos = cos.data(), a.sin = sin.data(), a.slot = slot.data(), a.pos = pos.data();
    a.q = q, a.kcache = kcache, a.vcache = vcache;
    a.R = c.R, a.H = c.H, a.heads = c.heads, a.kv_heads = c.kv_heads, a.d = c.d, a.slot_stride = stride;
    return a;
  }

  // q to fp32 noise; each cached value the same bf16 or its neighbour, nearly all identical; every
  // entry the step does not write left as it was, and the step's entries written.
  void expect_matches(const std::vector<float>& q, const std::vector<uint16_t>& kc,
                      const std::vector<uint16_t>& vc) const {
    float qmax = 0.f;
    for (float v : q_ref) qmax = std::max(qmax, std::fabs(v));
    for (size_t i = 0; i < q.size(); i++) ASSERT_NEAR(q[i], q_ref[i], 1e-5f * qmax) << "q " << i;
    const size_t written = expect_bf16_neighbours(kc, k_ref, &cache0, 0.95, "k cache entry") +
                           expect_bf16_neighbours(vc, v_ref, &cache0, 0.95, "v cache entry");
    EXPECT_GE(written, size_t(2 * c.R * kd) * 9 / 10) << "the cache was not written";
  }
};

struct GateUpCase {
  int R;
  int64_t IC, I;
  bool bias;
};

// A gate_up_swiglu_w16 call's host inputs and the CPU table's out16 on them.
struct GateUpInputs {
  GateUpCase c;
  std::vector<uint16_t> x16, wg, wu, ref;
  std::vector<float> bg, bu;

  explicit GateUpInputs(const GateUpCase& cs) : c(cs) {
    x16 = bf16_bits(randn(size_t(c.R * c.IC), uint64_t(20 + c.IC)));
    wg = bf16_bits(randn(size_t(c.I * c.IC), 21, 0.3f));
    wu = bf16_bits(randn(size_t(c.I * c.IC), 22, 0.3f));
    bg = randn(size_t(c.I), 23), bu = randn(size_t(c.I), 24);
    ref.assign(size_t(c.R * c.I), 0);
    cpu_bf16_matmul_ops().gate_up_swiglu_w16(ref.data(), x16.data(), wg.data(), gate_bias(), wu.data(), up_bias(),
                                             c.R, c.IC, c.I);
  }
  const float* gate_bias() const { return c.bias ? bg.data() : nullptr; }
  const float* up_bias() const { return c.bias ? bu.data() : nullptr; }
};

}  // namespace azr::kernels::testing
