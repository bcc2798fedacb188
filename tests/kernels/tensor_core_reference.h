#pragma once
// Host emulation of the tensor-core attention's arithmetic, and the checks of a kernel against it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_matmul.h"

namespace azr::kernels::testing {

// The tensor-core attention's arithmetic (kernels/cuda/attention_tensor_core.cuh), emulated on
// the host from the math, for its tests on a GPU (cuda_ops_test.cpp) and on the CPU emulation of
// the device (tensor_core_emulated_test.cpp): q, k, v and dout rounded to bf16; scores, lse and
// the softmax in double; P = exp(scale s - lse) split into two bf16 terms (hi + lo) for P v,
// and rounded to one for P^T dout; dS = P (dP - D) rounded to bf16 for dS k and dS^T q. The
// kernel sums in fp32, so a probability or dS within fp32 rounding of a bf16 boundary may round
// to the neighbouring value: each output element may differ by one bf16 step (2^-7 relative at
// most; 2^-15 for the split P) of every such term, which is the element's `slack`, a bound no
// correct kernel exceeds. Such flips are rare, so the
// mean difference must also be at fp32 rounding level: a systematic error (a wrong mask, a
// missing tile, a transposed operand) fails that even where it hides inside the slack.
struct TensorCoreReference {
  std::vector<float> out, lse, dq, dk, dv;
  std::vector<double> out_slack, dq_slack, dk_slack, dv_slack;
};

inline TensorCoreReference emulate_tensor_core_attention(const std::vector<float>& q, const std::vector<float>& k,
                                                         const std::vector<float>& v, const std::vector<float>& dout,
                                                         int64_t B, int64_t T, int64_t H, int64_t KV, int64_t d,
                                                         const std::vector<int32_t>& lengths) {
  constexpr double kStep = 0x1p-7;        // one bf16 step, relative, at most
  constexpr double kSplitStep = 0x1p-15;  // P's two-term split: its rounding, relative, at most
  auto bf = [](std::vector<float> x) {
    for (float& e : x) e = round_to_bf16(e);
    return x;
  };
  const auto q16 = bf(q), k16 = bf(k), v16 = bf(v), g16 = bf(dout);
  const int64_t group = H / KV, q_row = H * d, kv_row = KV * d;
  const double scale = double(1.f / std::sqrt(float(d)));  // the kernel's fp32 scale
  TensorCoreReference r;
  const size_t qn = size_t(B * T * q_row), kvn = size_t(B * T * kv_row);
  r.out.assign(qn, 0.f), r.dq.assign(qn, 0.f), r.dk.assign(kvn, 0.f), r.dv.assign(kvn, 0.f);
  r.lse.assign(size_t(B * H * T), 0.f);
  r.out_slack.assign(qn, 0.0), r.dq_slack.assign(qn, 0.0), r.dk_slack.assign(kvn, 0.0), r.dv_slack.assign(kvn, 0.0);
  std::vector<double> dk(kvn, 0.0), dv(kvn, 0.0);
  for (int64_t b = 0; b < B; b++) {
    const int64_t L = lengths.empty() ? T : lengths[size_t(b)];
    for (int64_t h = 0; h < H; h++) {
      const int64_t g = h / group;
      for (int64_t t = 0; t < L; t++) {
        const size_t qo = size_t((b * T + t) * q_row + h * d);
        auto kv_at = [&](int64_t j) { return size_t((b * T + j) * kv_row + g * d); };
        std::vector<double> p(size_t(t + 1));
        double mx = -INFINITY;
        for (int64_t j = 0; j <= t; j++) {
          double sc = 0;
          for (int64_t i = 0; i < d; i++) sc += double(q16[qo + i]) * k16[kv_at(j) + i];
          p[size_t(j)] = sc * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        double sum = 0;
        for (double x : p) sum += std::exp(x - mx);
        const double lse = mx + std::log(sum);
        r.lse[size_t((b * H + h) * T + t)] = float(lse);
        for (double& x : p) x = std::exp(x - lse);
        std::vector<double> o(size_t(d), 0.0);
        for (int64_t j = 0; j <= t; j++) {
          // P as the kernel splits it: hi = bf16(P), lo = bf16(P - hi), both from P in fp32; a
          // P a few fp32 ulps away gives a sum hi + lo within 2^-15 of this one.
          const float pf = float(p[size_t(j)]), hi = round_to_bf16(pf), lo = round_to_bf16(pf - hi);
          const double p_split = double(hi) + double(lo);
          for (int64_t i = 0; i < d; i++) {
            o[size_t(i)] += p_split * v16[kv_at(j) + i];
            r.out_slack[qo + i] += kSplitStep * p[size_t(j)] * std::fabs(v16[kv_at(j) + i]);
          }
        }
        double D = 0;  // the kernel's D: fp32 dout against the forward's output
        for (int64_t i = 0; i < d; i++) D += double(dout[qo + i]) * o[size_t(i)];
        for (int64_t i = 0; i < d; i++) r.out[qo + i] = float(o[size_t(i)]);
        for (int64_t j = 0; j <= t; j++) {
          double dp = 0;
          for (int64_t i = 0; i < d; i++) dp += double(g16[qo + i]) * v16[kv_at(j) + i];
          const double pj = p[size_t(j)], ds = pj * (dp - D);
          const double p16 = round_to_bf16(float(pj)), ds16 = round_to_bf16(float(ds));
          for (int64_t i = 0; i < d; i++) {
            r.dq[qo + i] += float(scale * ds16 * k16[kv_at(j) + i]);
            r.dq_slack[qo + i] += scale * kStep * std::fabs(ds) * std::fabs(k16[kv_at(j) + i]);
            dk[kv_at(j) + i] += scale * ds16 * q16[qo + i];
            r.dk_slack[kv_at(j) + i] += scale * kStep * std::fabs(ds) * std::fabs(q16[qo + i]);
            dv[kv_at(j) + i] += p16 * g16[qo + i];
            r.dv_slack[kv_at(j) + i] += kStep * pj * std::fabs(g16[qo + i]);
          }
        }
      }
    }
  }
  for (size_t i = 0; i < kvn; i++) r.dk[i] = float(dk[i]), r.dv[i] = float(dv[i]);
  return r;
}

// |got - want| <= slack + 1e-4 (1 + |want|) everywhere, and the mean difference within 1e-4 of
// the mean magnitude (fp32 summation).
inline void expect_within_slack(const std::vector<float>& got, const std::vector<float>& want,
                         const std::vector<double>& slack, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_excess = -INFINITY, diff = 0, mag = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double err = std::fabs(double(got[i]) - want[i]), tol = slack[i] + 1e-4 * (1 + std::fabs(want[i]));
    if (!(err <= tol)) bad++;
    if (!(err - tol <= worst_excess)) worst_excess = err - tol, worst = i;
    diff += err, mag += std::fabs(want[i]);
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements past their slack; worst at "
                     << worst << ": kernel " << got[worst] << " vs emulated " << want[worst] << " (slack "
                     << slack[worst] << ")";
  EXPECT_LE(diff, 1e-4 * mag + 1e-7 * double(got.size())) << what << ": mean |difference| " << diff / got.size()
                                                          << " against mean |value| " << mag / got.size();
  std::printf("%-4s mean |kernel - emulated| %.2e, mean |value| %.2e\n", what.c_str(), diff / got.size(),
              mag / got.size());
}

// Every output of the kernels against the reference: out, dq, dk, dv within their slack, lse to
// fp32 rounding (it is computed from exact bf16 products, summed in fp32).
inline void expect_matches_tensor_core_reference(const TensorCoreReference& want, const std::vector<float>& out,
                                                 const std::vector<float>& lse, const std::vector<float>& dq,
                                                 const std::vector<float>& dk, const std::vector<float>& dv) {
  expect_within_slack(out, want.out, want.out_slack, "out");
  expect_within_slack(dq, want.dq, want.dq_slack, "dq");
  expect_within_slack(dk, want.dk, want.dk_slack, "dk");
  expect_within_slack(dv, want.dv, want.dv_slack, "dv");
  ASSERT_EQ(lse.size(), want.lse.size());
  size_t bad = 0;
  for (size_t i = 0; i < lse.size(); i++) bad += !(std::fabs(double(lse[i]) - want.lse[i]) <= 1e-5 * (1 + std::fabs(want.lse[i])));
  EXPECT_EQ(bad, 0u) << "lse: " << bad << " of " << lse.size() << " differ by more than fp32 rounding";
}

// got against want where the two sum the same terms in another order (the merged backward's
// atomics against the split one's stores): every element within 1e-6 of want's largest magnitude.
inline void expect_same_to_fp32_sums(const std::vector<float>& got, const std::vector<float>& want,
                                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double mag = 0;
  for (float x : want) mag = std::max(mag, double(std::fabs(x)));
  for (size_t i = 0; i < want.size(); i++) ASSERT_NEAR(got[i], want[i], 1e-6 * mag) << what << " at " << i;
}

}  // namespace azr::kernels::testing
