// The CUDA backend's unfiltered and greedy samplers (kernels/cuda/sampling_unfiltered.cuh,
// sampling_greedy.cuh) on the CPU, through tests/kernels/cuda_emulation.h, a stand-in for the
// device, so that they run in CI, where there is no GPU: a block per row, and the few-rows path
// that splits each row over blocks (the parts' maxima or first maxima, their masses, the ticket
// that elects each row's last block, the choice of part, then of warp segment, then the scan),
// against the CPU backend's sampler (model::sample_token, row by row) on the same rows and
// uniforms: the same tokens, log-probs to float rounding. The GPU test (CudaSampling) checks the
// same on the hardware, every mode and the full vocabulary; and only there do a row's blocks run
// at once, which the ticket that elects the last block exists for (here blocks run one after
// another, so any block that closes the row sees every part's result).
//
// Small shapes: every CUDA thread is a std::thread here.
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/sampling_greedy.cuh"
#include "kernels/cuda/sampling_unfiltered.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/random_inputs.h"
#include "tests/kernels/sampling_cases.h"

namespace azr::kernels::cuda_detail::sampling {
namespace {

using namespace azr::kernels::testing;

// The unfiltered modes of the GPU test's cases.
std::vector<SampleCase> unfiltered_cases() {
  std::vector<SampleCase> out;
  for (const SampleCase& c : kSampleCases)
    if (c.temperature > 0.f && c.top_k == 0 && c.top_p == 1.f) out.push_back(c);
  return out;
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

// The kernels as sampling.cu launches them; parts == 1: a block per row.
Result run(const std::vector<float>& logits, const std::vector<double>& u, int64_t R, int64_t V, int64_t limit,
           float temperature, int64_t parts) {
  Result out{std::vector<int32_t>(size_t(R), -1), std::vector<float>(size_t(R), NAN)};
  const SampleArgs a{out.tokens.data(), out.logprobs.data(), logits.data(), u.data(), V, limit,
                     1.0 / double(temperature), 0, 1.f};
  if (parts == 1) {
    emu::launch({unsigned(R), 1, 1}, kThreads, 0, unfiltered_kernel, a);
    return out;
  }
  std::vector<float> part_max(size_t(R * parts), NAN);
  std::vector<double> part_mass(size_t(R * parts), NAN);
  std::vector<unsigned> tickets(size_t(R), 0);
  emu::launch({unsigned(parts), unsigned(R), 1}, kThreads, 0, part_max_kernel, a, part_max.data());
  emu::launch({unsigned(parts), unsigned(R), 1}, kThreads, 0, part_mass_kernel, a,
              static_cast<const float*>(part_max.data()), part_mass.data(), tickets.data());
  for (int64_t r = 0; r < R; r++) EXPECT_EQ(tickets[size_t(r)], 0u) << "row " << r << "'s tickets not reset";
  return out;
}

TEST(SamplingEmulated, UnfilteredTokensAreTheCpusOnEverySplit) {
  const int64_t R = 4;  // one row of each kind make_awkward makes
  // At V = 263 a part is shorter than a block; at 24,000 a warp's segment (1,500 tokens, or 750
  // in a half) is longer, so the scan runs over several tiles.
  for (const int64_t V : {int64_t(263), int64_t(24000)}) {
    const std::vector<float> base = randn(size_t(R * V), 70);
    for (const SampleCase& c : unfiltered_cases()) {
      std::vector<float> logits(base.size());
      for (size_t i = 0; i < base.size(); i++) logits[i] = base[i] * c.scale;
      make_awkward(logits, R, V);
      const int64_t limit = V - c.limit_short;
      const std::vector<double> u = uniforms_off_boundaries(logits, R, V, limit, c, 71);
      std::vector<int32_t> want(static_cast<size_t>(R));
      std::vector<float> want_lp(static_cast<size_t>(R));
      cpu_ops().sample_rows(want.data(), want_lp.data(), logits.data(), u.data(), R, V, limit, c.temperature,
                            c.top_k, c.top_p);
      for (const int64_t parts : {int64_t(1), V < 1000 ? int64_t(3) : int64_t(2)}) {  // a block per row; parts
        SCOPED_TRACE(std::string(c.name) + " V " + std::to_string(V) + " parts " + std::to_string(parts));
        const Result got = run(logits, u, R, V, limit, c.temperature, parts);
        for (int64_t r = 0; r < R; r++) {
          EXPECT_EQ(got.tokens[size_t(r)], want[size_t(r)]) << "row " << r << " (u = " << u[size_t(r)] << ")";
          EXPECT_NEAR(got.logprobs[size_t(r)], want_lp[size_t(r)], 1e-6 + 1e-6 * std::fabs(want_lp[size_t(r)]))
              << "row " << r;
        }
      }
    }
  }
}

// u at the far end: the CPU's fallback (no crossing within rounding of 1: the last token with
// p > 0), on both paths, and a row whose tail is -inf, so the fallback steps back over it.
TEST(SamplingEmulated, UnfilteredFallbackTakesTheLastTokenWithMass) {
  const int64_t R = 2, V = 3000;
  std::vector<float> logits = randn(size_t(R * V), 72);
  for (int64_t j = V - 40; j < V; j++) logits[size_t(V + j)] = -INFINITY;  // row 1's last 40 tokens
  const std::vector<double> u = {std::nextafter(1.0, 0.0), std::nextafter(1.0, 0.0)};
  std::vector<int32_t> want(static_cast<size_t>(R));
  std::vector<float> want_lp(static_cast<size_t>(R));
  cpu_ops().sample_rows(want.data(), want_lp.data(), logits.data(), u.data(), R, V, V, 1.f, 0, 1.f);
  EXPECT_EQ(want[1], V - 41);  // the CPU's own answer, by hand: the last finite logit
  for (const int64_t parts : {int64_t(1), int64_t(2)}) {
    const Result got = run(logits, u, R, V, V, 1.f, parts);
    EXPECT_EQ(got.tokens, want) << "parts " << parts;
  }
}

// Greedy as sampling.cu launches it; parts == 1: a block per row.
Result run_greedy(const std::vector<float>& logits, int64_t R, int64_t V, int64_t limit, int64_t parts) {
  Result out{std::vector<int32_t>(size_t(R), -1), std::vector<float>(size_t(R), NAN)};
  const SampleArgs a{out.tokens.data(), out.logprobs.data(), logits.data(), nullptr, V, limit, 0.0, 0, 1.f};
  if (parts == 1) {
    emu::launch({unsigned(R), 1, 1}, kThreads, 0, greedy_kernel, a);
    return out;
  }
  std::vector<float> part_v(size_t(R * parts), NAN);
  std::vector<int64_t> part_at(size_t(R * parts), -1);
  std::vector<double> part_sum(size_t(R * parts), NAN);
  std::vector<unsigned> tickets(size_t(R), 0);
  emu::launch({unsigned(parts), unsigned(R), 1}, kThreads, 0, part_argmax_kernel, a, part_v.data(), part_at.data());
  emu::launch({unsigned(parts), unsigned(R), 1}, kThreads, 0, part_expsum_kernel, a,
              static_cast<const float*>(part_v.data()), static_cast<const int64_t*>(part_at.data()), part_sum.data(),
              tickets.data());
  for (int64_t r = 0; r < R; r++) EXPECT_EQ(tickets[size_t(r)], 0u) << "row " << r << "'s tickets not reset";
  return out;
}

void expect_greedy_matches_cpu(const std::vector<float>& logits, int64_t R, int64_t V, int64_t limit, int64_t parts) {
  std::vector<int32_t> want(static_cast<size_t>(R));
  std::vector<float> want_lp(static_cast<size_t>(R));
  const std::vector<double> u(static_cast<size_t>(R), 0.5);  // unused by greedy
  cpu_ops().sample_rows(want.data(), want_lp.data(), logits.data(), u.data(), R, V, limit, 0.f, 0, 1.f);
  const Result got = run_greedy(logits, R, V, limit, parts);
  for (int64_t r = 0; r < R; r++) {
    EXPECT_EQ(got.tokens[size_t(r)], want[size_t(r)]) << "row " << r;
    EXPECT_NEAR(got.logprobs[size_t(r)], want_lp[size_t(r)], 1e-6 + 1e-6 * std::fabs(want_lp[size_t(r)]))
        << "row " << r;
  }
}

// The GPU test's greedy cases (awkward rows: -inf runs, a tied maximum at V/3 and V/2, which the
// split puts in different parts, -0 beside +0).
TEST(SamplingEmulated, GreedyTokensAreTheCpusOnEverySplit) {
  const int64_t R = 4;
  for (const int64_t V : {int64_t(263), int64_t(24000)}) {
    const std::vector<float> base = randn(size_t(R * V), 73);
    for (const SampleCase& c : kSampleCases) {
      if (c.temperature != 0.f) continue;
      std::vector<float> logits(base.size());
      for (size_t i = 0; i < base.size(); i++) logits[i] = base[i] * c.scale;
      make_awkward(logits, R, V);
      for (const int64_t parts : {int64_t(1), int64_t(3)}) {
        SCOPED_TRACE(std::string(c.name) + " V " + std::to_string(V) + " parts " + std::to_string(parts));
        expect_greedy_matches_cpu(logits, R, V, V - c.limit_short, parts);
      }
    }
  }
}

// Rows built for the split into 3 parts of 1,000: a first part that is all -inf (its own answer
// is its first id, which must lose to any finite value); the same maximum at 1100 and 1612 (one
// thread's, 512 apart, in one part) and at 2200 (another part): the lowest id wins. Against the
// CPU and by hand, split and not.
TEST(SamplingEmulated, GreedySplitRowsTakeTheFirstMaximum) {
  const int64_t R = 2, V = 3000;
  std::vector<float> logits = randn(size_t(R * V), 74);
  for (int64_t j = 0; j < 1000; j++) logits[size_t(j)] = -INFINITY;
  logits[size_t(2500)] = 50.f;
  logits[size_t(V + 1100)] = logits[size_t(V + 1612)] = logits[size_t(V + 2200)] = 40.f;
  for (const int64_t parts : {int64_t(1), int64_t(3)}) {
    const Result got = run_greedy(logits, R, V, V, parts);
    EXPECT_EQ(got.tokens[0], 2500) << "parts " << parts;
    EXPECT_EQ(got.tokens[1], 1100) << "parts " << parts;
    expect_greedy_matches_cpu(logits, R, V, V, parts);
  }
}

TEST(SamplingEmulated, PartsFillTheGpuAndKeepPartsLong) {
  EXPECT_EQ(parts_for(1, 151936, 132), 128);  // batch 1: 264 blocks wanted, 128 at most
  EXPECT_EQ(parts_for(64, 151936, 132), 4);   // 256 blocks
  EXPECT_EQ(parts_for(256, 151936, 132), 4);  // 264 blocks would be one a row: 4 parts a row at least
  EXPECT_EQ(parts_for(1000, 151936, 132), 4);
  EXPECT_EQ(parts_for(1000, 2048, 132), 2);   // a row long enough for 2 parts of 1,024 tokens, not 4
  EXPECT_EQ(parts_for(65535, 151936, 132), 4);
  EXPECT_EQ(parts_for(65536, 151936, 132), 1);  // past the grid's 65,535 rows in y: a block a row
  EXPECT_EQ(parts_for(2, 5000, 132), 4);      // parts of at least 1,024 tokens (two per thread)
  EXPECT_EQ(parts_for(1, 263, 132), 1);       // too short to split
  // Aiming at 8 blocks per multiprocessor: 1,056 blocks
  EXPECT_EQ(parts_for(256, 151936, 132, 8), 4);
  EXPECT_EQ(parts_for(64, 151936, 132, 8), 16);
  EXPECT_EQ(parts_for(1, 151936, 132, 8), 128);
}

}  // namespace
}  // namespace azr::kernels::cuda_detail::sampling
