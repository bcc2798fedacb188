// The CPU kernels' exp and softmax pieces (kernels/cpu/fast_exp.h) against exp in double: within
// 1 ulp of exp over the whole float range, the special values exact, a
// vector lane the same bits as the scalar, and the max and sum helpers equal to sequential ones.
#include "kernels/cpu/fast_exp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

namespace azr::kernels::cpu_detail {
namespace {

// |got - exp(x)| in units of the spacing of floats at exp(x) (2^-149 for subnormal results).
double ulp_error(float x, float got) {
  const double want = std::exp(double(x));
  if (std::isinf(want) || want > double(std::numeric_limits<float>::max())) return std::isinf(got) ? 0 : 1e9;
  int e;
  std::frexp(want, &e);  // want = m 2^e, m in [0.5, 1)
  const double spacing = std::ldexp(1.0, std::max(e - 24, -149));
  return std::abs(double(got) - want) / spacing;
}

TEST(FastExp, WithinOneUlpOfExpOverEveryFloatExponent) {
  // Every 97th float bit pattern from -110 to 90 (about 22 million values), so each binade of
  // the inputs is covered densely.
  const uint32_t lo = std::bit_cast<uint32_t>(110.f), hi = std::bit_cast<uint32_t>(90.f);
  double worst = 0;
  float worst_x = 0;
  auto check = [&](float x) {
    const double err = ulp_error(x, fast_exp(x));
    if (err > worst) worst = err, worst_x = x;
  };
  for (uint32_t b = 0; b <= lo; b += 97) check(-std::bit_cast<float>(b));  // 0 down to -110
  for (uint32_t b = 0; b <= hi; b += 97) check(std::bit_cast<float>(b));   // 0 up to 90
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
  std::printf("fast_exp: worst error %.3f ulp, at x = %.9g\n", worst, double(worst_x));
}

TEST(FastExp, SpecialValuesAreExp) {
  EXPECT_EQ(fast_exp(0.f), 1.f);
  EXPECT_EQ(fast_exp(-0.f), 1.f);
  EXPECT_EQ(fast_exp(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fast_exp(-std::numeric_limits<float>::infinity()), 0.f);
  EXPECT_TRUE(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(fast_exp(88.8f), std::numeric_limits<float>::infinity());  // exp(88.8) > FLT_MAX
  EXPECT_EQ(fast_exp(-104.f), 0.f);                                    // below half the least subnormal
  EXPECT_GT(fast_exp(-103.f), 0.f);                                    // a subnormal: exp(-103) = 1.4e-45
  EXPECT_LT(fast_exp(88.7f), std::numeric_limits<float>::infinity());
}

TEST(FastExp, AVectorLaneIsTheScalarBitForBit) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-120.f, 100.f);
  for (int i = 0; i < 100000; i++) {
    const f32x4 x = {dist(rng), dist(rng), dist(rng), dist(rng)};
    const f32x4 y = exp_of(x);
    for (int u = 0; u < kLanes; u++) ASSERT_EQ(std::bit_cast<uint32_t>(y[u]), std::bit_cast<uint32_t>(fast_exp(x[u])));
  }
}

TEST(FastExp, MaxAndShiftedSumMatchSequentialLoops) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.f, 4.f);
  for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 1000, 2049}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    float mx = x[0];
    for (float v : x) mx = std::max(mx, v);
    EXPECT_EQ(max_of(x.data(), n), mx) << "n = " << n;

    std::vector<float> e = x;
    const float sum = exp_shifted_sum(e.data(), n, mx);
    double want_sum = 0;
    for (int64_t j = 0; j < n; j++) {
      EXPECT_EQ(e[j], fast_exp(x[j] - mx)) << "n = " << n << ", j = " << j;
      EXPECT_LE(ulp_error(x[j] - mx, e[j]), 1.0);
      want_sum += std::exp(double(x[j]) - double(mx));
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum * double(n)) << "n = " << n;
  }
}

}  // namespace
}  // namespace azr::kernels::cpu_detail
