#pragma once
// Draws from a seeded std::mt19937_64 that are the same on every standard library.
//
// mt19937_64's sequence is fixed by the C++ standard, but the distributions and std::shuffle are
// not: libstdc++ and libc++ map the same bits to different integers, doubles and orders. A seed
// in a config names one run (the tasks a step samples, the bootstrap's warm-start batches, the
// points a math verdict is checked at), so every draw that a seed decides goes through these.

#include <cstdint>
#include <random>
#include <utility>

namespace azr::buffer {

// Uniform integer in [0, n), n > 0, by rejection: exact, no modulo bias.
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % n;
}

// Uniform double in [low, high) from the top 53 bits of one draw.
inline double uniform_between(std::mt19937_64& rng, double low, double high) {
  const double unit = static_cast<double>(rng() >> 11) * 0x1p-53;  // [0, 1)
  return low + (high - low) * unit;
}

// Fisher-Yates over [first, last), drawing as uniform_below does.
template <class RandomIt>
void seeded_shuffle(RandomIt first, RandomIt last, std::mt19937_64& rng) {
  for (auto n = static_cast<uint64_t>(last - first); n > 1; --n)
    std::swap(first[n - 1], first[uniform_below(rng, n)]);
}

}  // namespace azr::buffer
