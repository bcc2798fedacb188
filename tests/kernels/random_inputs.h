#pragma once
// Random op inputs for the kernel tests: n draws of normal(0, scale), reproducible from a seed.
#include <cstdint>
#include <random>
#include <vector>

namespace azr::kernels::testing {

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace azr::kernels::testing
