#pragma once
// The CPU backend's decode attention, over a KV cache of fp32 (kernels/cpu/cpu_ops.cpp) or of bf16
// bit patterns (the Bf16 table's attention_decode_w16, kernels/cpu/bf16_matmul.cpp): one query row
// per sequence against its cached keys 0..pos[r], softmax and the weighted sum of its values, in
// fp32. The same arithmetic for both element types, so a bf16 cache gives what an fp32 cache
// holding the same (bf16-representable) values gives, bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/fast_exp.h"
#include "kernels/ops.h"

namespace azr::kernels::cpu_detail {

inline float kv_value(float x) { return x; }
inline float kv_value(uint16_t x) {
  const uint32_t bits = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// `acc += a[i] * b[i]` in 8 independent lanes (they vectorise), summed pairwise at the end.
template <class KV>
float dot_kv(const float* a, const KV* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; u++) acc[u] += a[i + u] * kv_value(b[i + u]);
  float r = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; i++) r += a[i] * kv_value(b[i]);
  return r;
}

template <class KV>
void attention_decode_rows(float* out, const float* q, const KV* kcache, const KV* vcache, const int32_t* slot,
                           const int32_t* pos, int64_t R, const AttentionShape& s, int64_t parallel_min) {
  const int64_t H = s.heads, d = s.d, group = s.heads / s.kv_heads, kv_row = s.kv_heads * d;
  const float scale = 1.f / std::sqrt(float(d));
  const int64_t longest = R > 0 ? int64_t(*std::max_element(pos, pos + R)) + 1 : 0;
#pragma omp parallel if (R * H * d * longest >= parallel_min)
  {
    static thread_local std::vector<float> buf;  // grow-only: the hot loop never allocates
#pragma omp for schedule(dynamic, 1) collapse(2)
    for (int64_t r = 0; r < R; r++) {
      for (int64_t h = 0; h < H; h++) {
        const int64_t n = int64_t(pos[r]) + 1;
        const float* qh = q + (r * H + h) * d;
        const KV* kb = kcache + int64_t(slot[r]) * s.kv_seq_stride + (h / group) * d;
        const KV* vb = vcache + int64_t(slot[r]) * s.kv_seq_stride + (h / group) * d;
        if (buf.size() < size_t(n)) buf.resize(size_t(n));
        float* sc = buf.data();
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
          sc[j] = dot_kv(qh, kb + j * kv_row, d) * scale;
          mx = std::max(mx, sc[j]);
        }
        const float sum = exp_shifted_sum(sc, n, mx);
        float* o = out + (r * H + h) * d;
        std::memset(o, 0, sizeof(float) * size_t(d));
        const float inv = 1.f / sum;
        for (int64_t j = 0; j < n; j++) {
          const float p = sc[j] * inv;
          const KV* vj = vb + j * kv_row;
          for (int64_t i = 0; i < d; i++) o[i] += p * kv_value(vj[i]);
        }
      }
    }
  }
}

}  // namespace azr::kernels::cpu_detail
