#pragma once
// exp, and the softmax pieces built on it, for the CPU kernels' attention and SwiGLU, four lanes
// at a time. std::exp is a call into libm per element, which no loop around it can vectorise,
// and a float sum in one accumulator is a chain the compiler may not reorder: at long sequences
// attention's softmax, not its GEMMs, was most of a CPU training step (model_speed_bench
// --op-profile, bench/RESULTS.md).
//
// exp_of is Cephes' expf: x = k ln2 + r with k = round(x / ln2) and ln2 split in two (Cody and
// Waite) so that r is exact, then a degree-6 polynomial for exp(r) on |r| <= ln2 / 2, scaled by
// 2^k. It agrees with exp to within 1 ulp (0.96 at worst) over float's whole range, subnormal
// results, overflow to +inf, -inf and NaN included (tests/kernels/fast_exp_test.cpp, against exp
// in double). 2^k is applied as two factors, so every k from -150 to 128 has a normal power of
// two and no branch.
//
// One template for a float and for a vector of 4 floats (GCC's and Clang's vector_size: plain C++
// operators, no intrinsics; 16 bytes is what every 64-bit target has registers for, SSE2 on
// x86-64 and NEON on AArch64, while 32 would need -mavx and change the ABI), so a lane of a vector
// and a scalar get the same bits: the tails of the loops below are exact twins of their bodies.
#include <bit>
#include <cstdint>
#include <cstring>

namespace azr::kernels::cpu_detail {

typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef uint32_t u32x4 __attribute__((vector_size(16)));

template <class F>
struct LanesOf;
template <>
struct LanesOf<float> {
  using I = int32_t;
  using U = uint32_t;
};
template <>
struct LanesOf<f32x4> {
  using I = i32x4;
  using U = u32x4;
};

template <class F>
inline F exp_of(F x) {
  using I = typename LanesOf<F>::I;
  using U = typename LanesOf<F>::U;
  // Past these exp is 0 or +inf anyway; the clamp keeps k within the two factors' range. A NaN
  // lane stays NaN (every comparison with it is false).
  const F lo = F{} - 104.f, hi = F{} + 89.f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // k = round(x / ln2), read off the float's low mantissa bits after adding 1.5 * 2^23.
  constexpr float kShifter = 12582912.f;
  const F t = x * 1.44269504088896341f + kShifter;
  const F k = t - kShifter;
  const I n = std::bit_cast<I>(t) - std::bit_cast<int32_t>(kShifter);
  const F r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
  const F p = ((((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
                 1.6666665459e-1f) *
                    r +
                5.0000001201e-1f) *
                   (r * r) +
               r) +
              1.f;
  const I n1 = n >> 1, n2 = n - n1;  // each within -75..64: 2^n1 and 2^n2 are normal floats
  const F s1 = std::bit_cast<F>(std::bit_cast<U>(n1 + 127) << 23);
  const F s2 = std::bit_cast<F>(std::bit_cast<U>(n2 + 127) << 23);
  return p * s1 * s2;
}

inline float fast_exp(float x) { return exp_of(x); }

constexpr int kLanes = 4;
inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, f32x4 v) { std::memcpy(p, &v, sizeof v); }

// The largest of x[0..n-1] (n >= 1); for inputs without NaN the same value as a sequential max.
inline float max_of(const float* x, int64_t n) {
  int64_t i = 0;
  float r = x[0];
  if (n >= kLanes) {
    f32x4 m = load4(x);
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      const f32x4 v = load4(x + i);
      m = v > m ? v : m;
    }
    for (int u = 0; u < kLanes; u++) r = m[u] > r ? m[u] : r;
  }
  for (; i < n; i++) r = x[i] > r ? x[i] : r;
  return r;
}

// x[j] = exp(x[j] - shift) for j < n; returns their sum, in lanes (the order differs from a
// sequential sum's by rounding only).
inline float exp_shifted_sum(float* x, int64_t n, float shift) {
  f32x4 acc = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const f32x4 e = exp_of(load4(x + i) - shift);
    store4(x + i, e);
    acc += e;
  }
  float r = (acc[0] + acc[2]) + (acc[1] + acc[3]);
  for (; i < n; i++) r += (x[i] = fast_exp(x[i] - shift));
  return r;
}

}  // namespace azr::kernels::cpu_detail
