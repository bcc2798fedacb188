// The CPU backend's sample_rows op (kernels/ops.h): row by row the same decisions as
// model::sample_token, and, on small vocabularies, the distributions worked out by hand here.
// tests/kernels/cuda_ops_test.cpp checks the CUDA op against this one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "kernels/ops.h"
#include "model/generate.h"
#include "tests/kernels/sampling_full_sort.h"

namespace azr::kernels {
namespace {

struct Mode {
  std::string name;
  float temperature;
  int32_t top_k;
  float top_p;
  int64_t vocab_limit;  // 0 = all of V
};

// Random rows with the awkward cases mixed in: -inf entries, a tied maximum, a tied run of
// ordinary values, and -0 next to +0.
std::vector<float> awkward_logits(int64_t R, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<float> z(size_t(R * V));
  for (float& x : z) x = normal(rng);
  for (int64_t r = 0; r < R; r++) {
    float* row = &z[size_t(r * V)];
    if (r % 4 == 1)
      for (int64_t j = 0; j < V; j += 3) row[j] = -INFINITY;
    if (r % 4 == 2) {  // the maximum twice, and a run of equal values
      float mx = row[0];
      for (int64_t j = 1; j < V; j++) mx = std::max(mx, row[j]);
      row[V / 2] = row[V - 2] = mx + 1.f;
      for (int64_t j = 5; j < V && j < 25; j++) row[j] = 0.5f;
    }
    if (r % 4 == 3) row[1] = -0.f, row[2] = 0.f, row[3] = -0.f;
  }
  return z;
}

TEST(CpuSampleRows, EqualsSampleTokenRowByRow) {
  const int64_t R = 24, V = 97;
  const std::vector<float> logits = awkward_logits(R, V, 1);
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> u(R);
  for (double& x : u) x = uniform(rng);
  u[0] = 0.0, u[1] = std::nextafter(1.0, 0.0);  // the ends of [0, 1)
  const std::vector<Mode> modes = {
      {"greedy", 0.f, 0, 1.f, 0},          {"unfiltered", 1.f, 0, 1.f, 0},    {"hot", 2.5f, 0, 1.f, 0},
      {"cold", 0.3f, 0, 1.f, 0},           {"top_k", 1.f, 7, 1.f, 0},         {"top_k_1", 0.8f, 1, 1.f, 0},
      {"top_k_all", 1.f, 97, 1.f, 0},      {"top_p", 1.f, 0, 0.6f, 0},        {"top_p_tiny", 1.f, 0, 1e-3f, 0},
      {"top_k_top_p", 0.7f, 12, 0.8f, 0},  {"limit", 1.f, 0, 1.f, 60},        {"limit_greedy", 0.f, 0, 1.f, 60},
      {"limit_top_k", 1.2f, 9, 1.f, 60},   {"limit_top_p", 1.f, 0, 0.9f, 60}, {"limit_top_k_top_p", 1.f, 70, 0.5f, 41},
  };
  for (const Mode& m : modes) {
    std::vector<int32_t> tokens(R, -1);
    std::vector<float> logprobs(R, 7.f);
    const int64_t limit = m.vocab_limit > 0 ? m.vocab_limit : V;
    cpu_ops().sample_rows(tokens.data(), logprobs.data(), logits.data(), u.data(), R, V, limit, m.temperature, m.top_k,
                          m.top_p);
    model::SamplingParams p;
    p.temperature = m.temperature, p.top_k = m.top_k, p.top_p = m.top_p, p.vocab_limit = m.vocab_limit;
    for (int64_t r = 0; r < R; r++) {
      float lp = 0;
      const int32_t want = model::sample_token(&logits[size_t(r * V)], V, p, u[size_t(r)], &lp);
      EXPECT_EQ(tokens[r], want) << m.name << " row " << r;
      EXPECT_EQ(logprobs[r], lp) << m.name << " row " << r;  // the same code: bit for bit
      EXPECT_LT(tokens[r], limit) << m.name << " row " << r;
      EXPECT_TRUE(std::isfinite(logprobs[r])) << m.name << " row " << r;  // never a zero-probability token
    }
  }
}

// One row repeated n times with u on the uniform grid (i + 0.5) / n: inverse-CDF sampling then
// hits each token in proportion to its probability, to within one draw.
struct Drawn {
  std::vector<int> counts;
  std::vector<float> logprob;  // of each token drawn (NaN for tokens never drawn)
};

Drawn draw_grid(const std::vector<float>& row, int n, float temperature, int32_t top_k, float top_p) {
  const int64_t V = int64_t(row.size());
  std::vector<float> logits;
  for (int i = 0; i < n; i++) logits.insert(logits.end(), row.begin(), row.end());
  const size_t count = static_cast<size_t>(n);
  std::vector<double> u(count);
  for (size_t i = 0; i < count; i++) u[i] = (double(i) + 0.5) / n;
  std::vector<int32_t> tokens(count);
  std::vector<float> logprobs(count);
  cpu_ops().sample_rows(tokens.data(), logprobs.data(), logits.data(), u.data(), n, V, V, temperature, top_k, top_p);
  Drawn d{std::vector<int>(size_t(V), 0), std::vector<float>(size_t(V), NAN)};
  for (size_t i = 0; i < count; i++) {
    d.counts[size_t(tokens[i])]++;
    d.logprob[size_t(tokens[i])] = logprobs[i];
  }
  return d;
}

void expect_distribution(const Drawn& d, const std::vector<double>& want, int n, const std::string& what) {
  for (size_t t = 0; t < want.size(); t++) {
    EXPECT_NEAR(d.counts[t], want[t] * n, 1.0) << what << ": token " << t;
    if (want[t] > 0) {
      EXPECT_NEAR(d.logprob[t], std::log(want[t]), 1e-6) << what << ": log-prob of token " << t;
    }
  }
}

// Logits whose softmax is p (log p shifted by a constant, which softmax ignores).
std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> z;
  for (double x : p) z.push_back(x > 0 ? float(std::log(x) + 1.5) : -INFINITY);
  return z;
}

TEST(CpuSampleRows, TopPKeepsAndRenormalisesTheHandComputedSet) {
  // p = [0.1, 0.4, 0.05, 0.25, 0.2]; by probability: 1 (0.4), 3 (0.25), 4 (0.2), 0, 2.
  // top_p = 0.7: mass before 1 is 0 < 0.7, before 3 is 0.4 < 0.7, before 4 is 0.65 < 0.7, before 0
  // is 0.85 >= 0.7: keep {1, 3, 4}, mass 0.85, renormalised 0.4/0.85, 0.25/0.85, 0.2/0.85.
  const int n = 20000;
  const Drawn d = draw_grid(logits_of({0.1, 0.4, 0.05, 0.25, 0.2}), n, 1.f, 0, 0.7f);
  expect_distribution(d, {0, 0.4 / 0.85, 0, 0.25 / 0.85, 0.2 / 0.85}, n, "top_p 0.7");
}

TEST(CpuSampleRows, TemperatureThenTopKByHand) {
  // Temperature 2 turns p into sqrt(p) renormalised; top_k = 2 keeps tokens 1 and 3:
  // sqrt(0.4) / (sqrt(0.4) + sqrt(0.25)) and sqrt(0.25) / (the same).
  const int n = 20000;
  const Drawn d = draw_grid(logits_of({0.1, 0.4, 0.05, 0.25, 0.2}), n, 2.f, 2, 1.f);
  const double z = std::sqrt(0.4) + std::sqrt(0.25);
  expect_distribution(d, {0, std::sqrt(0.4) / z, 0, std::sqrt(0.25) / z, 0}, n, "t 2, top_k 2");
}

TEST(CpuSampleRows, TiesAndMinusInfinityByHand) {
  // p = [1, 2, 2, 0, 1] / 6, token 3 at -inf. Unfiltered: token 3 never drawn.
  const std::vector<float> row = logits_of({1 / 6., 2 / 6., 2 / 6., 0, 1 / 6.});
  const int n = 6000;
  expect_distribution(draw_grid(row, n, 1.f, 0, 1.f), {1 / 6., 2 / 6., 2 / 6., 0, 1 / 6.}, n, "unfiltered");
  // top_k = 3: by probability, ties by id: 1, 2, then 0 (before 4); {1, 2, 0} renormalised by 5/6.
  // Walked in that order, u < 0.4 gives 1, u < 0.8 gives 2, the rest 0.
  const Drawn k3 = draw_grid(row, n, 1.f, 3, 1.f);
  expect_distribution(k3, {0.2, 0.4, 0.4, 0, 0}, n, "top_k 3");
  // top_k = 4 keeps {1, 2, 0, 4}, not the -inf token; top_p 0.5 of those is {1, 2} (mass before
  // 2: 1/3 < 0.5; before 0: 2/3 >= 0.5).
  expect_distribution(draw_grid(row, n, 1.f, 4, 0.5f), {0, 0.5, 0.5, 0, 0}, n, "top_k 4, top_p 0.5");
  // Greedy: the first of the tied maxima, log-prob at temperature 1.
  const Drawn g = draw_grid(row, 10, 0.f, 0, 1.f);
  EXPECT_EQ(g.counts[1], 10);
  EXPECT_NEAR(g.logprob[1], std::log(2 / 6.), 1e-6);
}

TEST(CpuSampleRows, UniformOrderIsByIdWithoutFilters) {
  // Unfiltered, the CDF runs in id order: u just below p_0 picks token 0, just above picks 1,
  // although token 1 is the more likely one. (1e-4: the float logits move p_0 by ~1e-7.)
  const std::vector<float> row = logits_of({0.3, 0.6, 0.1});
  const std::vector<float> logits = {row[0], row[1], row[2], row[0], row[1], row[2]};
  const std::vector<double> u = {0.3 - 1e-4, 0.3 + 1e-4};
  std::vector<int32_t> tokens(2);
  std::vector<float> lp(2);
  cpu_ops().sample_rows(tokens.data(), lp.data(), logits.data(), u.data(), 2, 3, 3, 1.f, 0, 1.f);
  EXPECT_EQ(tokens[0], 0);
  EXPECT_EQ(tokens[1], 1);
  EXPECT_NEAR(lp[0], std::log(0.3), 1e-6);
  EXPECT_NEAR(lp[1], std::log(0.6), 1e-6);
}

// The sampler orders only the prefix the filters can keep (growing it 4x at a time for top-p: 256,
// 1,024, 4,096, 16,384, then the row); the plain way sorts every candidate
// (tests/kernels/sampling_full_sort.h). Over peaked, moderate and nearly flat rows of 20,000 with
// the awkward cases, so that top-p's prefix stops at every size, and every mode of filtering: the
// same tokens, and log-probs to float rounding (without top-k, the sampler sums the row's mass in
// id order, the plain way in sorted order).
TEST(CpuSampleRows, OrderingTheKeptPrefixPicksWhatSortingEverythingPicks) {
  const int64_t R = 8, V = 20000;
  const std::vector<float> base = awkward_logits(R, V, 5);  // N(0, 9)
  std::mt19937_64 rng(6);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  struct Filter {
    float temperature;
    int32_t top_k;
    float top_p;
  };
  const Filter filters[] = {{1.f, 0, 1e-4f}, {1.f, 0, 0.5f},   {0.7f, 0, 0.9f},  {1.f, 0, 0.95f}, {1.3f, 0, 0.999f},
                            {1.f, 1, 1.f},   {1.f, 50, 1.f},   {1.f, 3000, 1.f}, {1.f, 40, 0.8f}, {1.f, 5000, 0.97f}};
  int64_t rows = 0, mismatches = 0;
  for (const float scale : {1.f, 1.f / 6, 1.f / 60}) {  // N(0, 9), N(0, 0.25), N(0, 0.0025)
    std::vector<float> logits(base);
    for (float& x : logits) x *= scale;
    for (const Filter& f : filters)
      for (int64_t r = 0; r < R; r++) {
        const float* row = &logits[size_t(r * V)];
        const double u = uniform(rng);
        float lp = 0, want_lp = 0;
        const int32_t got = sample_row(row, V, f.temperature, f.top_k, f.top_p, u, &lp);
        const int32_t want = testing::full_sort_sample_row(row, V, f.temperature, f.top_k, f.top_p, u, &want_lp);
        rows++;
        if (got != want && mismatches++ < 5)
          ADD_FAILURE() << "scale " << scale << " t " << f.temperature << " top_k " << f.top_k << " top_p " << f.top_p
                        << " row " << r << ": " << got << ", sorting everything " << want;
        EXPECT_NEAR(lp, want_lp, 1e-6 + 1e-6 * std::fabs(want_lp));
      }
  }
  EXPECT_EQ(mismatches, 0) << "of " << rows << " rows";
}

}  // namespace
}  // namespace azr::kernels
