#pragma once
// The CPU backend's decode attention, over a KV cache of fp32 (kernels/cpu/cpu_ops.cpp) or of bf16
// bit patterns (the Bf16 table's attention_decode_w16, kernels/cpu/bf16_matmul.cpp): each row's
// query heads against its cached keys 0..pos[r], softmax and the weighted sum of its values, in
// fp32. Per (row, kv head), the heads of its GQA group take their scores and outputs as two GEMMs
// over the cached positions, as the training attention does per query block (cpu_ops.cpp): each
// key and value is read once per group, and OpenBLAS multiplies at the CPU's full vector width,
// which the portable code here cannot (16-byte vectors, no FMA). A bf16 cache is widened to fp32
// first and then takes the same two GEMMs, so it gives what an fp32 cache holding the same
// (bf16-representable) values gives, bit for bit.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
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

template <class KV>
void attention_decode_rows(float* out, const float* q, const KV* kcache, const KV* vcache, const int32_t* slot,
                           const int32_t* pos, int64_t R, const AttentionShape& s, int64_t parallel_min) {
  const int64_t H = s.heads, d = s.d, KVH = s.kv_heads, group = s.heads / s.kv_heads, kv_row = KVH * d;
  const float scale = 1.f / std::sqrt(float(d));
  const int64_t longest = R > 0 ? int64_t(*std::max_element(pos, pos + R)) + 1 : 0;
#pragma omp parallel if (R * H * d * longest >= parallel_min)
  {
    static thread_local std::vector<float> scores, keys, values;  // grow-only: the hot loop never allocates
#pragma omp for schedule(dynamic, 1) collapse(2)
    for (int64_t r = 0; r < R; r++) {
      for (int64_t g = 0; g < KVH; g++) {
        const int64_t n = int64_t(pos[r]) + 1;
        const float* qg = q + (r * H + g * group) * d;  // the group's query heads, rows of d
        float* og = out + (r * H + g * group) * d;
        const KV* kb = kcache + int64_t(slot[r]) * s.kv_seq_stride + g * d;
        const KV* vb = vcache + int64_t(slot[r]) * s.kv_seq_stride + g * d;
        const float *K, *V;
        int64_t ld = kv_row;
        if constexpr (std::is_same_v<KV, float>) {
          K = kb, V = vb;
        } else {
          if (keys.size() < size_t(n * d)) keys.resize(size_t(n * d)), values.resize(size_t(n * d));
          for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < d; i++) {
              keys[size_t(j * d + i)] = kv_value(kb[j * kv_row + i]);
              values[size_t(j * d + i)] = kv_value(vb[j * kv_row + i]);
            }
          K = keys.data(), V = values.data(), ld = d;
        }
        if (scores.size() < size_t(group * n)) scores.resize(size_t(group * n));
        float* S = scores.data();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(group), int(n), int(d), scale, qg, int(d), K, int(ld),
                    0.f, S, int(n));
        for (int64_t h = 0; h < group; h++) {
          float* row = S + h * n;
          const float sum = exp_shifted_sum(row, n, max_of(row, n));
          const float inv = 1.f / sum;
          for (int64_t j = 0; j < n; j++) row[j] *= inv;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(group), int(d), int(n), 1.f, S, int(n), V, int(ld),
                    0.f, og, int(d));
      }
    }
  }
}

}  // namespace azr::kernels::cpu_detail
