// The CUDA backend's samplers (kernels/cuda/sampling_unfiltered.cuh, sampling_greedy.cuh,
// sampling_filtered.cuh) on the CPU, through tests/kernels/cuda_emulation.h, a stand-in for the
// device, so that they run in CI, where there is no GPU: a block per row, and the few-rows path
// that splits each row over blocks (the parts' maxima or first maxima, their masses, the ticket
// that elects each row's last block, the choice of part, then of warp segment, then the scan; for
// top-k and top-p, the bins, the list of the tokens they can keep, and the walk over it),
// against the CPU backend's sampler (model::sample_token, row by row) on the same rows and
// uniforms: the same tokens, log-probs to float rounding. The GPU test (CudaSampling) checks the
// same on the hardware, every mode and the full vocabulary; and only there do a row's blocks run
// at once, which the ticket that elects the last block exists for (here blocks run one after
// another, so any block that closes the row sees every part's result).
//
// Small shapes: here every CUDA thread runs in turn on one core (tests/kernels/emulation_fibers.h).
#include "tests/kernels/cuda_emulation.h"  // first: it stands in for the CUDA headers
//
#include "kernels/cuda/sampling_filtered.cuh"
#include "kernels/cuda/sampling_greedy.cuh"
#include "kernels/cuda/sampling_unfiltered.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "tests/kernels/random_inputs.h"
#include "tests/kernels/sampling_cases.h"
#include "tests/kernels/sampling_full_sort.h"

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

// The kernels as sampling.cu launches them; parts == 1: a block per row; else one pass over the
// parts (part_stats_kernel) or, with one_pass false, two (cuda_set_split_sampling_one_pass).
Result run(const std::vector<float>& logits, const std::vector<double>& u, int64_t R, int64_t V, int64_t limit,
           float temperature, int64_t parts, bool one_pass = true) {
  Result out{std::vector<int32_t>(size_t(R), -1), std::vector<float>(size_t(R), NAN)};
  const SampleArgs a{out.tokens.data(), out.logprobs.data(), logits.data(), u.data(), V, limit,
                     1.0 / double(temperature), 0, 1.f};
  if (parts == 1) {
    emu::launch({unsigned(R), 1, 1}, kThreads, 0, unfiltered_kernel, a);
    return out;
  }
  std::vector<unsigned> tickets(size_t(R), 0);
  if (one_pass) {
    std::vector<double> part_stats(size_t(2 * R * parts), NAN);
    emu::launch({unsigned(parts), unsigned(R), 1}, kThreads, 0, part_stats_kernel, a, part_stats.data(),
                tickets.data());
  } else {
    std::vector<float> part_max(size_t(R * parts), NAN);
    std::vector<double> part_mass(size_t(R * parts), NAN);
    emu::launch({unsigned(parts), unsigned(R), 1}, kThreads, 0, part_max_kernel, a, part_max.data());
    emu::launch({unsigned(parts), unsigned(R), 1}, kThreads, 0, part_mass_kernel, a,
                static_cast<const float*>(part_max.data()), part_mass.data(), tickets.data());
  }
  for (int64_t r = 0; r < R; r++) EXPECT_EQ(tickets[size_t(r)], 0u) << "row " << r << "'s tickets not reset";
  return out;
}

// The one pass's running (maximum, mass) against the definition: the maximum of the values, and
// the sum of exp(x - max) in double over the finite ones, to double rounding (each rescale adds a
// rounding of its own); -inf values add nothing, and a pair that saw only -inf is (-inf, 0).
// Merging is commutative bit for bit (the warp butterfly's lanes then agree) and gives the pair of
// the values seen by both.
TEST(SamplingEmulated, RunningMassIsTheMassAgainstTheMaximum) {
  std::mt19937_64 rng(31);
  std::normal_distribution<double> normal(0.0, 4.0);
  for (int trial = 0; trial < 50; trial++) {
    std::vector<double> xs(size_t(1 + trial * 7));
    for (double& x : xs) {
      x = trial % 5 == 0 ? -INFINITY : normal(rng);  // every fifth: all -inf
    }
    if (trial % 3 == 1) xs[xs.size() / 2] = -INFINITY;
    RunningMass all{-INFINITY, 0.0}, first{-INFINITY, 0.0}, second{-INFINITY, 0.0};
    for (size_t i = 0; i < xs.size(); i++) {
      add_value(all, xs[i]);
      add_value(i < xs.size() / 3 ? first : second, xs[i]);
    }
    const double mx = *std::max_element(xs.begin(), xs.end());
    double want = 0;
    for (const double x : xs)
      if (x > -INFINITY) want += std::exp(x - mx);
    SCOPED_TRACE("trial " + std::to_string(trial));
    EXPECT_EQ(all.m, mx);
    EXPECT_NEAR(all.s, want, 1e-13 * want);
    const RunningMass ab = merged(first, second), ba = merged(second, first);
    EXPECT_EQ(ab.m, mx);
    EXPECT_EQ(std::memcmp(&ab, &ba, sizeof ab), 0);
    EXPECT_NEAR(ab.s, want, 1e-13 * want);
    if (mx == -INFINITY) {
      EXPECT_EQ(all.s, 0.0);
    }
  }
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
      // A block per row; parts, read once and read twice.
      const int64_t split = V < 1000 ? 3 : 2;
      for (const auto& [parts, one_pass] :
           {std::pair{int64_t(1), true}, std::pair{split, true}, std::pair{split, false}}) {
        SCOPED_TRACE(std::string(c.name) + " V " + std::to_string(V) + " parts " + std::to_string(parts) +
                     (one_pass ? "" : ", two passes"));
        const Result got = run(logits, u, R, V, limit, c.temperature, parts, one_pass);
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
  for (const int64_t parts : {int64_t(1), int64_t(2)})
    for (const bool one_pass : {true, false}) {
      const Result got = run(logits, u, R, V, V, 1.f, parts, one_pass);
      EXPECT_EQ(got.tokens, want) << "parts " << parts << (one_pass ? "" : ", two passes");
    }
}

// Greedy as sampling.cu launches it; parts == 1: a block per row; else one pass over the parts
// (part_greedy_kernel) or, with one_pass false, two (cuda_set_split_sampling_one_pass).
Result run_greedy(const std::vector<float>& logits, int64_t R, int64_t V, int64_t limit, int64_t parts,
                  bool one_pass = true) {
  Result out{std::vector<int32_t>(size_t(R), -1), std::vector<float>(size_t(R), NAN)};
  const SampleArgs a{out.tokens.data(), out.logprobs.data(), logits.data(), nullptr, V, limit, 0.0, 0, 1.f};
  if (parts == 1) {
    emu::launch({unsigned(R), 1, 1}, kThreads, 0, greedy_kernel, a);
    return out;
  }
  std::vector<float> part_v(size_t(R * parts), NAN);
  std::vector<int64_t> part_at(size_t(R * parts), -1);
  std::vector<double> part_sum(size_t(2 * R * parts), NAN);
  std::vector<unsigned> tickets(size_t(R), 0);
  if (one_pass) {
    emu::launch({unsigned(parts), unsigned(R), 1}, kThreads, 0, part_greedy_kernel, a, part_v.data(), part_at.data(),
                part_sum.data(), tickets.data());
  } else {
    emu::launch({unsigned(parts), unsigned(R), 1}, kThreads, 0, part_argmax_kernel, a, part_v.data(), part_at.data());
    emu::launch({unsigned(parts), unsigned(R), 1}, kThreads, 0, part_expsum_kernel, a,
                static_cast<const float*>(part_v.data()), static_cast<const int64_t*>(part_at.data()), part_sum.data(),
                tickets.data());
  }
  for (int64_t r = 0; r < R; r++) EXPECT_EQ(tickets[size_t(r)], 0u) << "row " << r << "'s tickets not reset";
  return out;
}

// Split rows both ways: their parts read once and read twice.
void expect_greedy_matches_cpu(const std::vector<float>& logits, int64_t R, int64_t V, int64_t limit, int64_t parts) {
  std::vector<int32_t> want(static_cast<size_t>(R));
  std::vector<float> want_lp(static_cast<size_t>(R));
  const std::vector<double> u(static_cast<size_t>(R), 0.5);  // unused by greedy
  cpu_ops().sample_rows(want.data(), want_lp.data(), logits.data(), u.data(), R, V, limit, 0.f, 0, 1.f);
  for (const bool one_pass : parts == 1 ? std::vector<bool>{true} : std::vector<bool>{true, false}) {
    SCOPED_TRACE(one_pass ? "one pass" : "two passes");
    const Result got = run_greedy(logits, R, V, limit, parts, one_pass);
    for (int64_t r = 0; r < R; r++) {
      EXPECT_EQ(got.tokens[size_t(r)], want[size_t(r)]) << "row " << r;
      EXPECT_NEAR(got.logprobs[size_t(r)], want_lp[size_t(r)], 1e-6 + 1e-6 * std::fabs(want_lp[size_t(r)]))
          << "row " << r;
    }
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
    for (const bool one_pass : {true, false}) {
      const Result got = run_greedy(logits, R, V, V, parts, one_pass);
      EXPECT_EQ(got.tokens[0], 2500) << "parts " << parts << (one_pass ? "" : ", two passes");
      EXPECT_EQ(got.tokens[1], 1100) << "parts " << parts << (one_pass ? "" : ", two passes");
    }
    expect_greedy_matches_cpu(logits, R, V, V, parts);
  }
}

// A row all -inf: the first id, and a NaN log-prob as the CPU gives (exp(-inf - -inf)), in every
// form; the one-pass parts once gave -log(0), +inf.
TEST(SamplingEmulated, GreedyRowOfMinusInfinityIsTheCpusNaN) {
  const int64_t R = 1, V = 3000;
  const std::vector<float> logits(size_t(V), -INFINITY);
  std::vector<int32_t> want(1);
  std::vector<float> want_lp(1);
  const std::vector<double> u(1, 0.5);
  cpu_ops().sample_rows(want.data(), want_lp.data(), logits.data(), u.data(), R, V, V, 0.f, 0, 1.f);
  ASSERT_TRUE(std::isnan(want_lp[0])) << want_lp[0];
  for (const int64_t parts : {int64_t(1), int64_t(3)})
    for (const bool one_pass : {true, false}) {
      const Result got = run_greedy(logits, R, V, V, parts, one_pass);
      EXPECT_EQ(got.tokens[0], want[0]) << "parts " << parts << (one_pass ? "" : ", two passes");
      EXPECT_TRUE(std::isnan(got.logprobs[0])) << "parts " << parts << (one_pass ? "" : ", two passes") << ": "
                                               << got.logprobs[0];
    }
}

// A diverged model's NaN logits: the CPU's sums carry a NaN into the log-prob; its greedy token is
// std::max_element's (which compares with <, so a NaN is never taken but at id 0, where it starts
// and then stays), and its draw finds no crossing and takes the last token whose probability is
// not 0 (a NaN one included). Rows, for the split into 3 parts of 1,000: one NaN inside the middle
// part; all NaN; a NaN at id 5 (a thread's first entry) with the maximum at 517; a NaN at 1000 (a
// part's first) with the maximum at 1500; a NaN at id 0. Greedy and t = 1, every form. The
// one-pass parts once dropped the NaN from the sums (a finite log-prob, or +inf for a row all NaN,
// and another token at t = 1), and every greedy form once kept a NaN that was a thread's first
// entry as its maximum, which hid the thread's later values.
TEST(SamplingEmulated, NaNLogitsGiveTheCpusTokenAndNaNLogProb) {
  const int64_t R = 5, V = 3000;
  std::vector<float> logits = randn(size_t(R * V), 75, 3.f);
  auto row = [&](int64_t r) { return logits.begin() + r * V; };
  row(0)[1500] = NAN;
  std::fill(row(1), row(1) + V, NAN);
  row(2)[5] = NAN, row(2)[517] = 40.f;
  row(3)[1000] = NAN, row(3)[1500] = 40.f;
  row(4)[0] = NAN;
  const std::vector<double> u(static_cast<size_t>(R), 0.3);
  for (const float temperature : {0.f, 1.f}) {
    std::vector<int32_t> want(static_cast<size_t>(R));
    std::vector<float> want_lp(static_cast<size_t>(R));
    cpu_ops().sample_rows(want.data(), want_lp.data(), logits.data(), u.data(), R, V, V, temperature, 0, 1.f);
    for (int64_t r = 0; r < R; r++) ASSERT_TRUE(std::isnan(want_lp[size_t(r)])) << "row " << r << ": " << want_lp[r];
    if (temperature == 0.f) {  // by hand, std::max_element's rule
      EXPECT_EQ(want[2], 517);
      EXPECT_EQ(want[3], 1500);
      EXPECT_EQ(want[4], 0);
    }
    for (const int64_t parts : {int64_t(1), int64_t(3)})
      for (const bool one_pass : {true, false}) {
        SCOPED_TRACE("t " + std::to_string(temperature) + " parts " + std::to_string(parts) +
                     (one_pass ? "" : ", two passes"));
        const Result got = temperature == 0.f ? run_greedy(logits, R, V, V, parts, one_pass)
                                              : run(logits, u, R, V, V, temperature, parts, one_pass);
        EXPECT_EQ(got.tokens, want);
        for (int64_t r = 0; r < R; r++)
          EXPECT_TRUE(std::isnan(got.logprobs[size_t(r)])) << "row " << r << ": " << got.logprobs[size_t(r)];
      }
  }
}

struct FilteredRun {
  Result result;
  std::vector<unsigned> listed;    // each row's list length, before the last kernel zeroes it
  std::vector<int32_t> last_bin;
};

// Filtered sampling as sampling.cu launches it: parts == 1, a block per row reading its row;
// otherwise the split, with lists of `capacity` keys a row. Checks that the split leaves its
// tickets, bins and list counts at zero for the next call.
FilteredRun run_filtered(const std::vector<float>& logits, const std::vector<double>& u, int64_t R, int64_t V,
                         int64_t limit, const SampleCase& c, int64_t parts, int64_t capacity) {
  FilteredRun out{{std::vector<int32_t>(size_t(R), -1), std::vector<float>(size_t(R), NAN)}, {}, {}};
  const SampleArgs a{out.result.tokens.data(), out.result.logprobs.data(), logits.data(), u.data(), V, limit,
                     1.0 / double(c.temperature), c.top_k, c.top_p};
  if (parts == 1) {
    emu::launch({unsigned(R), 1, 1}, kThreads, 0, filtered_kernel, a);
    return out;
  }
  std::vector<float> part_max(size_t(R * parts), NAN);
  std::vector<double> part_mass(size_t(R * parts), NAN), totals(size_t(R), NAN);
  std::vector<unsigned> bin_count(size_t(R * kMassBins), 0), tickets(size_t(R), 0), listed(size_t(R), 0);
  std::vector<double> bin_mass(size_t(R * kMassBins), 0.0);
  std::vector<int32_t> last_bin(size_t(R), -1);
  std::vector<uint64_t> keys(size_t(R * capacity), 0);
  const EmuDim3 grid{unsigned(parts), unsigned(R), 1};
  emu::launch(grid, kThreads, 0, part_max_kernel, a, part_max.data());
  emu::launch(grid, kThreads, 0, part_bins_kernel, a, static_cast<const float*>(part_max.data()), part_mass.data(),
              bin_count.data(), bin_mass.data(), tickets.data(), totals.data(), last_bin.data());
  emu::launch(grid, kThreads, 0, gather_kernel, a, static_cast<const float*>(part_max.data()),
              static_cast<const int32_t*>(last_bin.data()), keys.data(), listed.data(), capacity);
  out.listed = listed;
  out.last_bin = last_bin;
  emu::launch({unsigned(R), 1, 1}, kThreads, 0, filtered_list_kernel, a, static_cast<const float*>(part_max.data()),
              parts, static_cast<const double*>(totals.data()), static_cast<const uint64_t*>(keys.data()),
              listed.data(), capacity);
  for (int64_t r = 0; r < R; r++) {
    EXPECT_EQ(tickets[size_t(r)], 0u) << "row " << r << "'s tickets not reset";
    EXPECT_EQ(listed[size_t(r)], 0u) << "row " << r << "'s list count not reset";
  }
  EXPECT_EQ(std::count(bin_count.begin(), bin_count.end(), 0u), std::ptrdiff_t(bin_count.size())) << "bins not reset";
  EXPECT_EQ(std::count(bin_mass.begin(), bin_mass.end(), 0.0), std::ptrdiff_t(bin_mass.size())) << "bins not reset";
  return out;
}

// The filtered cases, split, against the CPU's tokens and log-probs, on rows like the unfiltered
// test's. At V = 263, every case: with lists of 64 keys, which the peaked rows' kept sets fit and
// the flat rows overflow (those rows are then walked from the row, as filtered_kernel walks them);
// and a block per row. At V = 6,000, the cases that walk more than one chunk of 2,048 (flat rows,
// top_k 5000), with lists long enough for every row, with lists of 64 (walked from the row) and
// with a block per row.
TEST(SamplingEmulated, FilteredTokensAreTheCpusOnEverySplit) {
  const int64_t R = 4;
  int64_t listed_rows = 0, overflowed_rows = 0;  // of the split runs: both paths ran
  for (const int64_t V : {int64_t(263), int64_t(6000)}) {
    const std::vector<float> base = randn(size_t(R * V), 75);
    for (const SampleCase& c : kSampleCases) {
      const int64_t limit = V - c.limit_short;
      const bool several_chunks = c.scale < 1.f || c.top_k > kChunk;
      if (!filtered_at(c, limit) || (V > 1000 && !several_chunks)) continue;
      std::vector<float> logits(base.size());
      for (size_t i = 0; i < base.size(); i++) logits[i] = base[i] * c.scale;
      make_awkward(logits, R, V);
      const std::vector<double> u = uniforms_off_boundaries(logits, R, V, limit, c, 76);
      std::vector<int32_t> want(static_cast<size_t>(R));
      std::vector<float> want_lp(static_cast<size_t>(R));
      cpu_ops().sample_rows(want.data(), want_lp.data(), logits.data(), u.data(), R, V, limit, c.temperature,
                            c.top_k, c.top_p);
      struct Split {
        int64_t parts, capacity;
      };
      const std::vector<Split> splits =
          V < 1000 ? std::vector<Split>{{3, 64}, {1, 0}} : std::vector<Split>{{2, V}, {3, 64}, {1, 0}};
      for (const Split s : splits) {
        SCOPED_TRACE(std::string(c.name) + " V " + std::to_string(V) + " parts " + std::to_string(s.parts) +
                     " capacity " + std::to_string(s.capacity));
        const FilteredRun got = run_filtered(logits, u, R, V, limit, c, s.parts, s.capacity);
        for (int64_t r = 0; r < R; r++) {
          EXPECT_EQ(got.result.tokens[size_t(r)], want[size_t(r)]) << "row " << r << " (u = " << u[size_t(r)] << ")";
          EXPECT_NEAR(got.result.logprobs[size_t(r)], want_lp[size_t(r)], 1e-6 + 1e-6 * std::fabs(want_lp[size_t(r)]))
              << "row " << r;
          if (s.parts > 1) {  // the list holds the kept set, and no more than the row
            EXPECT_LE(full_sort_kept(&logits[size_t(r * V)], limit, c.temperature, c.top_k, c.top_p).keep,
                      int64_t(got.listed[size_t(r)]))
                << "row " << r;
            EXPECT_LE(int64_t(got.listed[size_t(r)]), limit) << "row " << r;
            (int64_t(got.listed[size_t(r)]) <= s.capacity ? listed_rows : overflowed_rows)++;
          }
        }
      }
    }
  }
  EXPECT_GT(listed_rows, 0);
  EXPECT_GT(overflowed_rows, 0);
}

// The bins by hand: a row whose logits lie at known distances below the maximum, at t = 1. Bin b
// holds the tokens 32 * b / 2048 .. below it (kBinsPerNat = 64 a unit), so with top_k 3 the list
// is the maximum's bin and the next two tokens' bins, whole: ties at a bin's edge go in with it;
// and with top_p, the bins up to where the mass reaches top_p of the total.
TEST(SamplingEmulated, FilteredSplitListsWholeBinsUpToTheKeptSet) {
  const int64_t V = 3000;
  std::vector<float> logits(size_t(V), -20.f);  // 20 below the maximum: bin 1280
  logits[10] = 0.f;                               // the maximum, bin 0
  logits[2000] = -0.01f;                          // bin 0 as well (0.64 bins)
  logits[500] = -0.5f, logits[501] = -0.5f;       // bin 32, tied
  logits[2999] = -0.52f;                          // bin 33
  const std::vector<double> u = {0.5};
  SampleCase c{"top_k_3", 1.f, 3, 1.f, 1.f, 0};
  FilteredRun got = run_filtered(logits, u, 1, V, V, c, 3, V);
  EXPECT_EQ(got.last_bin[0], 32);
  EXPECT_EQ(got.listed[0], 4u);  // 10, 2000, 500 and 501: the third token's bin, whole
  c = {"top_p", 1.f, 0, 0.5f, 1.f, 0};
  got = run_filtered(logits, u, 1, V, V, c, 3, V);
  // Masses 1, e^-0.01, 2 e^-0.5, e^-0.52, 2995 e^-20 (6e-6): half of 3.80 is passed in bin 0
  EXPECT_EQ(got.last_bin[0], 0);
  EXPECT_EQ(got.listed[0], 2u);
  c = {"top_p", 1.f, 0, 0.9f, 1.f, 0};  // 90% = 3.42: bins 0 and 32 hold 3.20, bin 33 reaches 3.80
  got = run_filtered(logits, u, 1, V, V, c, 3, V);
  EXPECT_EQ(got.last_bin[0], 33);
  EXPECT_EQ(got.listed[0], 5u);
}

// filtered_row over a list of row r's keys (list_n of them), as filtered_list_kernel runs it, and
// what its inverse CDF started from: the marks its walks left and the one it took.
struct ResumeSeen {
  int marks = -1, resume = -2;
  int64_t start = -1;
};
__global__ void __launch_bounds__(kThreads)
    filtered_resume_kernel(SampleArgs a, const uint64_t* keys, int64_t list_n, const double* mx,
                           const double* totals, ResumeSeen* seen) {
  __shared__ Chunk c;
  __shared__ int64_t keep_s;
  const int64_t r = blockIdx.x;
  if (threadIdx.x == 0) c.start = -1;
  __syncthreads();
  const Candidates row{nullptr, keys + r * list_n, list_n, a.inv_t, mx[r]};
  filtered_row(a, r, row, totals + r, c, &keep_s);
  if (threadIdx.x == 0) seen[r] = {c.marks, c.resume, c.resume >= 0 ? c.mark_start[c.resume] : -1};
}

// One run of filtered_resume_kernel, a row a block, each row's list its whole row, against the CPU.
struct ResumeRun {
  std::vector<int32_t> got, want;
  std::vector<float> got_lp, want_lp;
  std::vector<ResumeSeen> seen;
};
ResumeRun run_resume(const std::vector<float>& logits, const std::vector<double>& u, int64_t V, const SampleCase& c) {
  const int64_t R = int64_t(u.size());
  const size_t rows = u.size();
  std::vector<uint64_t> keys(size_t(R * V));
  std::vector<double> mx(rows), totals(rows, 0.0);
  for (int64_t r = 0; r < R; r++) {
    const float* z = &logits[size_t(r * V)];
    mx[size_t(r)] = double(*std::max_element(z, z + V));
    for (int64_t j = 0; j < V; j++) {
      keys[size_t(r * V + j)] = order_key(z[j], j);
      totals[size_t(r)] += std::exp(double(z[j]) - mx[size_t(r)]);  // in id order, as the CPU sums it
    }
  }
  ResumeRun run{std::vector<int32_t>(rows, -1), std::vector<int32_t>(rows), std::vector<float>(rows, NAN),
                std::vector<float>(rows), std::vector<ResumeSeen>(rows)};
  cpu_ops().sample_rows(run.want.data(), run.want_lp.data(), logits.data(), u.data(), R, V, V, c.temperature, c.top_k,
                        c.top_p);
  const SampleArgs a{run.got.data(), run.got_lp.data(), logits.data(), u.data(), V, V, 1.0, c.top_k, c.top_p};
  emu::launch({unsigned(R), 1, 1}, kThreads, 0, filtered_resume_kernel, a, static_cast<const uint64_t*>(keys.data()),
              V, static_cast<const double*>(mx.data()), static_cast<const double*>(totals.data()), run.seen.data());
  for (size_t r = 0; r < rows; r++) {
    EXPECT_EQ(run.got[r], run.want[r]) << "row " << r;
    EXPECT_NEAR(run.got_lp[r], run.want_lp[r], 1e-6 + 1e-6 * std::fabs(run.want_lp[r])) << "row " << r;
  }
  return run;
}

// The inverse CDF starts from the chunk that holds its target, where top-k's or top-p's walk
// marked it, with the mass before it: nearly flat rows of 6,000 tokens (each within 1% of the
// mean probability), whose kept sets span three chunks of 2,048 ranks (top_k 5,000; top_p 0.9,
// about 5,400), so that u = 0.1, 0.5 and 0.95 of the kept mass fall near ranks 500, 2,500 and
// 4,750: in chunks 0, 1 and 2 (marked at ranks 0, 2,048 and 4,096). The tokens and log-probs are
// the CPU's. The list holds the whole row (a prefix of any length is one).
TEST(SamplingEmulated, FilteredInverseCdfStartsFromTheChunkOfItsTarget) {
  const int64_t V = 6000;
  const std::vector<double> u = {0.1, 0.5, 0.95};
  std::vector<float> logits = randn(u.size() * size_t(V), 77);
  for (float& z : logits) z *= 0.003f;
  for (const SampleCase& c : {SampleCase{"top_k_5000", 1.f, 5000, 1.f, 1.f, 0},
                              SampleCase{"top_p_0.9", 1.f, 0, 0.9f, 1.f, 0}}) {
    SCOPED_TRACE(c.name);
    const ResumeRun run = run_resume(logits, u, V, c);
    for (size_t r = 0; r < u.size(); r++) {
      EXPECT_EQ(run.seen[r].marks, 3) << "row " << r;
      EXPECT_EQ(run.seen[r].resume, int(r)) << "row " << r;
      EXPECT_EQ(run.seen[r].start, 2048 * int64_t(r)) << "row " << r;
    }
  }
}

// Past the marks: nearly flat rows of 40,000 tokens with top_p 0.999, whose kept set (about
// 39,960 ranks) spans 20 chunks, more than the kMarks = 16 the walk marks. u = 0.28 falls near rank
// 11,200, in chunk 5 (marked at rank 10,240); u = 0.8, near rank 32,000, in chunk 15, the last
// marked; u = 0.95, near rank 38,000, in chunk 18, past the marks, so the draw starts from the last
// mark (rank 30,720) and walks on through chunks it did not mark.
TEST(SamplingEmulated, FilteredInverseCdfWalksOnPastTheLastMark) {
  const int64_t V = 40000;
  const std::vector<double> u = {0.28, 0.8, 0.95};
  std::vector<float> logits = randn(u.size() * size_t(V), 78);
  for (float& z : logits) z *= 0.003f;
  const ResumeRun run = run_resume(logits, u, V, SampleCase{"top_p_0.999", 1.f, 0, 0.999f, 1.f, 0});
  const int resume[] = {5, kMarks - 1, kMarks - 1};
  for (size_t r = 0; r < u.size(); r++) {
    EXPECT_EQ(run.seen[r].marks, kMarks) << "row " << r;
    EXPECT_EQ(run.seen[r].resume, resume[r]) << "row " << r;
    EXPECT_EQ(run.seen[r].start, int64_t(kChunk) * resume[r]) << "row " << r;
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
