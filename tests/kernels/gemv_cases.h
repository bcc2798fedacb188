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

// The fp32 accumulation error bound of a sum of n terms, added in any order (a tree, lanes then
// a warp reduction, OpenBLAS's blocks): |computed - exact| <= gamma(n-1) * sum |term| (Higham,
// "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 3.1). A product of two bf16
// values is exact in fp32 (8 x 8 significant bits), so only the additions round.
inline double fp32_sum_error(int64_t terms, double sum_abs) {
  const double n = double(std::max<int64_t>(terms - 1, 0)), u = std::ldexp(1.0, -24);
  return n * u / (1.0 - n * u) * sum_abs;
}

// x . w[j] + b over `len` bf16 pairs, exactly (double holds each product, and `len` of them, to
// within far less than fp32's error), and the fp32 accumulation error bound of computing it.
struct DotBound {
  double value, error;
};
inline DotBound dot_bound(const uint16_t* x, const uint16_t* w, int64_t len, const float* bias) {
  double value = bias ? double(*bias) : 0.0, sum_abs = std::fabs(value);
  for (int64_t i = 0; i < len; i++) {
    const double t = double(bf16_value(x[i])) * double(bf16_value(w[i]));
    value += t, sum_abs += std::fabs(t);
  }
  return {value, fp32_sum_error(len + (bias ? 1 : 0), sum_abs)};
}

// got and want are bf16 roundings of two fp32 computations of the same values. Each entry i may
// differ by one bf16 step at the larger magnitude (each rounding moves at most half of one) plus
// slack[i], the bound on how far apart the two fp32 values can be (the sums' accumulation error
// on both sides: a sum that cancels to a small value is far from it in bf16 steps); at least
// `exact_share` of them are identical. Entries equal to `before` in both are skipped (not
// written); returns how many were compared. The slack is the worst case, a few bf16 steps at a
// typical output of 1,536-term sums; a small systematic error (a term or a bias left out) shows in
// the share of identical entries, which two correct computations keep near 1.
inline size_t expect_bf16_within(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                                 const std::vector<uint16_t>* before, const std::vector<double>& slack,
                                 double exact_share, const char* what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(slack.size(), want.size()) << what;
  size_t compared = 0, exact = 0;
  for (size_t i = 0; i < std::min({got.size(), want.size(), slack.size()}); i++) {
    if (before && got[i] == (*before)[i] && want[i] == (*before)[i]) continue;
    compared++;
    exact += got[i] == want[i];
    const double g = bf16_value(got[i]), w = bf16_value(want[i]);
    const double allowed = bf16_step(float(std::max(std::fabs(g), std::fabs(w)))) + slack[i];
    if (!(std::fabs(g - w) <= allowed)) {
      ADD_FAILURE() << what << " " << i << ": " << g << " against " << w << ", " << std::fabs(g - w)
                    << " apart where " << allowed << " is allowed (slack " << slack[i] << ")";
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
  std::vector<double> k_slack, v_slack;  // expect_bf16_within's slack for each cache entry
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
    cache_slacks();
  }

  // How far apart two fp32 computations of a written cache entry can be. v: twice its sum's
  // error. k: RoPE mixes two of a head's sums with |cos| + |sin| <= sqrt 2 < 1.5, and rounds three
  // times more (products and an add, each at most 2^-24 of its operands' sizes); per head, the
  // largest sum error D and size M give 1.5 D + 4 * 2^-24 * 1.5 M on each side.
  void cache_slacks() {
    k_slack.assign(cache0.size(), 0.0), v_slack.assign(cache0.size(), 0.0);
    for (int r = 0; r < c.R; r++) {
      const uint16_t* x = x16.data() + size_t(r) * size_t(c.H);
      const int64_t at = int64_t(slot[size_t(r)]) * stride + int64_t(pos[size_t(r)]) * kd;
      for (int64_t h = 0; h < c.kv_heads; h++) {
        double D = 0, M = 0;
        for (int64_t i = h * c.d; i < (h + 1) * c.d; i++) {
          const DotBound k = dot_bound(x, wk.data() + i * c.H, c.H, c.bias ? &bk[size_t(i)] : nullptr);
          const DotBound v = dot_bound(x, wv.data() + i * c.H, c.H, c.bias ? &bv[size_t(i)] : nullptr);
          D = std::max(D, k.error), M = std::max(M, std::fabs(k.value) + k.error);
          v_slack[size_t(at + i)] = 2 * v.error;
        }
        for (int64_t i = h * c.d; i < (h + 1) * c.d; i++)
          k_slack[size_t(at + i)] = 2 * (1.5 * D + 4 * std::ldexp(1.5 * M, -24));
      }
    }
  }

  // The call on these inputs (host pointers) writing to q and the caches given.
  DecodeQkv args(float* q, uint16_t* kcache, uint16_t* vcache) const {
    DecodeQkv a;
    a.in.x16 = x16.data();
    a.wq = wq.data(), a.wk = wk.data(), a.wv = wv.data();
    if (c.bias) a.bq = bq.data(), a.bk = bk.data(), a.bv = bv.data();
    a.cos = cos.data(), a.sin = sin.data(), a.slot = slot.data(), a.pos = pos.data();
    a.q = q, a.kcache = kcache, a.vcache = vcache;
    a.R = c.R, a.H = c.H, a.heads = c.heads, a.kv_heads = c.kv_heads, a.d = c.d, a.slot_stride = stride;
    return a;
  }

  // q to fp32 noise; each cached value within a bf16 step and the sums' error of the CPU's
  // (expect_bf16_within), nearly all identical; every entry the step does not write left as it
  // was, and the step's entries written.
  void expect_matches(const std::vector<float>& q, const std::vector<uint16_t>& kc,
                      const std::vector<uint16_t>& vc) const {
    float qmax = 0.f;
    for (float v : q_ref) qmax = std::max(qmax, std::fabs(v));
    for (size_t i = 0; i < q.size(); i++) ASSERT_NEAR(q[i], q_ref[i], 1e-5f * qmax) << "q " << i;
    const size_t written = expect_bf16_within(kc, k_ref, &cache0, k_slack, 0.95, "k cache entry") +
                           expect_bf16_within(vc, v_ref, &cache0, v_slack, 0.95, "v cache entry");
    EXPECT_GE(written, size_t(2 * c.R * kd) * 9 / 10) << "the cache was not written";
  }
};

struct GateUpCase {
  int R;
  int64_t IC, I;
  bool bias;
  bool round = false;  // gate_up_swiglu_w16's round_gate_up
};

// silu(t) = t / (1 + e^-t), in double.
inline double silu(double t) { return t / (1.0 + std::exp(-t)); }

// A gate_up_swiglu_w16 call's host inputs, the CPU table's out16 on them, and each output's slack
// for expect_bf16_within.
struct GateUpInputs {
  GateUpCase c;
  std::vector<uint16_t> x16, wg, wu, ref;
  std::vector<float> bg, bu;
  std::vector<double> slack;

  explicit GateUpInputs(const GateUpCase& cs) : c(cs) {
    x16 = bf16_bits(randn(size_t(c.R * c.IC), uint64_t(20 + c.IC)));
    wg = bf16_bits(randn(size_t(c.I * c.IC), 21, 0.3f));
    wu = bf16_bits(randn(size_t(c.I * c.IC), 22, 0.3f));
    bg = randn(size_t(c.I), 23), bu = randn(size_t(c.I), 24);
    ref.assign(size_t(c.R * c.I), 0);
    cpu_bf16_matmul_ops().gate_up_swiglu_w16(ref.data(), {.x16 = x16.data()}, wg.data(), gate_bias(), wu.data(),
                                             up_bias(), c.R, c.IC, c.I, c.round);
    slack.resize(ref.size());
    for (int r = 0; r < c.R; r++)
      for (int64_t j = 0; j < c.I; j++)
        slack[size_t(r * c.I + j)] = 2 * output_error(r, j);
  }

  // How far an fp32 computation of output (r, j) can be from bf16's input, the exact silu(g) u:
  // g and u anywhere within their sums' error bounds, silu over that interval (it falls to its
  // minimum at t = -1.27846 and rises after, so its range is its ends' and perhaps that minimum),
  // the product's extremes at the corners; then silu's and the product's own rounding, within 8
  // units of 2^-24 of the result (an exp within 2 ulp, three more operations). With c.round, g and
  // u are rounded to bf16 before SwiGLU: a value within the bound rounds to within half a bf16
  // step (2^-8 of its size) further, so each interval widens by that.
  double output_error(int r, int64_t j) const {
    const uint16_t* x = x16.data() + size_t(r) * size_t(c.IC);
    DotBound g = dot_bound(x, wg.data() + j * c.IC, c.IC, c.bias ? &bg[size_t(j)] : nullptr);
    DotBound u = dot_bound(x, wu.data() + j * c.IC, c.IC, c.bias ? &bu[size_t(j)] : nullptr);
    if (c.round)
      for (DotBound* d : {&g, &u}) d->error += std::ldexp(std::fabs(d->value) + d->error, -8);
    const double lo = g.value - g.error, hi = g.value + g.error, t_min = -1.2784645427610738;
    double s_lo = std::min(silu(lo), silu(hi)), s_hi = std::max(silu(lo), silu(hi));
    if (lo < t_min && t_min < hi) s_lo = silu(t_min);
    const double exact = silu(g.value) * u.value;
    double dev = 0, size = 0;
    for (double s : {s_lo, s_hi})
      for (double v : {u.value - u.error, u.value + u.error})
        dev = std::max(dev, std::fabs(s * v - exact)), size = std::max(size, std::fabs(s * v));
    return dev + std::ldexp(8 * size, -24);
  }
  const float* gate_bias() const { return c.bias ? bg.data() : nullptr; }
  const float* up_bias() const { return c.bias ? bu.data() : nullptr; }
};

}  // namespace azr::kernels::testing
