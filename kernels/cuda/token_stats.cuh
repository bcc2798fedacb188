// Token statistics of the CUDA backend (kernels/ops.h: token_stats, token_stats_backward) over a
// block of the vocabulary: the LM head makes its logits a block of columns at a time, so these
// kernels see [n, cols] logits and carry each row's running statistics from block to block.
//
//   z = logits * inv_temp,  lse = logsumexp(z),  logp = z[target] - lse,  H = -sum p (z - lse)
//   d logp / dz_j = [j == target] - p_j,   dH / dz_j = -p_j (log p_j + H)
//
// One block per row. Each thread keeps an online (max m, sum e^(z-m), sum e^(z-m) (z-m)) over its
// columns in one pass (the entropy needs no second pass over the logits: H = log S - W / S with
// both sums taken from the maximum); the block joins the threads' sums rescaled to the block's
// maximum, and thread 0 joins the result to the row's running state in double, as the CPU does
// (kernels/cpu/cpu_ops.cpp), and writes lse, logp and entropy after the row's last block.
//
// V: values a thread takes at a time, 4 (quads.cuh: one 16-byte load, and for the bf16 gradient
// an 8-byte store) where the block's columns are a multiple of 4 and the pointers fit, which every
// LM-head tile of Qwen2's vocabulary is (151,936 = 4 x 37,984; tiles of 4,096 columns), else 1.
// Each thread takes the values of its groups in column order, so the two widths sum in different
// orders and agree to float rounding.
//
// The kernels are in this header, apart from their launches (token_stats.cu), so that
// tests/kernels/token_stats_emulated_test.cpp also runs them on the CPU through
// tests/kernels/cuda_emulation.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/device_or_emulation.cuh"
#include "kernels/cuda/quads.cuh"
#include "kernels/cuda/reductions.cuh"

namespace azr::kernels::cuda_detail::token_stats_kernels {

constexpr int kThreads = 512;  // a 151,936-column row: ~300 logits per thread

struct StatsArgs {
  float *lse, *logp, *entropy;
  double* state;  // [n, 4]: max, sum e^(z-max), sum e^(z-max) (z-max), the target's z
  const float* logits;
  const int32_t* targets;
  int64_t col0, cols, V;
  float inv_temp;
};

// (m, s, w) += one value z: s = sum e^(x-m), w = sum e^(x-m) (x-m) over the values so far; s == 0
// means none yet.
__device__ __forceinline__ void online_add(float z, float& m, float& s, float& w) {
  if (z > m) {
    if (s > 0.f) {
      const float a = expf(m - z);
      w = a * (w + (m - z) * s);
      s *= a;
    }
    s += 1.f;  // z itself: e^0, and nothing to w
    m = z;
  } else {
    const float d = z - m, e = expf(d);
    s += e;
    w += e * d;
  }
}

template <int V>
__global__ void __launch_bounds__(kThreads) stats_kernel(StatsArgs a) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const float* z = a.logits + r * a.cols;
  float m = -INFINITY, s = 0.f, w = 0.f;
  for (int64_t g = threadIdx.x; g < a.cols / V; g += blockDim.x) {
    const Group<V> zg = load_group<V>(z, g);
    for (int j = 0; j < V; j++) online_add(zg.v[j] * a.inv_temp, m, s, w);
  }
  const float M = block_max(m, shared);
  const float scale = s > 0.f ? expf(m - M) : 0.f;
  const float S = block_sum(s * scale, shared);
  const float W = block_sum(s > 0.f ? scale * (w + (m - M) * s) : 0.f, shared);
  if (threadIdx.x != 0) return;
  const int64_t t = a.targets ? a.targets[r] : -1;
  const bool target_here = t >= a.col0 && t < a.col0 + a.cols;
  double mx = M, sum = S, wsum = W, target_z = target_here ? double(z[t - a.col0] * a.inv_temp) : 0.0;
  if (a.col0 > 0) {  // join the running sums of the row's earlier blocks
    const double* st = a.state + 4 * r;
    const double top = fmax(st[0], mx), old = exp(st[0] - top), now = exp(mx - top);
    wsum = old * (st[2] + (st[0] - top) * st[1]) + now * (wsum + (mx - top) * sum);
    sum = old * st[1] + now * sum;
    mx = top;
    if (!target_here) target_z = st[3];
  }
  if (a.col0 + a.cols < a.V) {
    double* st = a.state + 4 * r;
    st[0] = mx, st[1] = sum, st[2] = wsum, st[3] = target_z;
    return;
  }
  const float l = float(mx) + float(log(sum));
  a.lse[r] = l;
  if (a.logp) a.logp[r] = t >= 0 ? float(target_z) - l : 0.f;
  if (a.entropy) a.entropy[r] = float(log(sum) - wsum / sum);
}

// dlogits16 (may be null): the gradient written only as its bf16 rounding, for the LM head's bf16
// GEMMs (kernels::Ops::token_stats_backward_w16); dlogits is then not written.
struct BackwardArgs {
  float* dlogits;
  __nv_bfloat16* dlogits16;
  const float *logits, *lse, *entropy, *dlogp, *dent;
  const int32_t* targets;
  int64_t col0, cols;
  float inv_temp;
};

// Each element is read and written by the same thread, so dlogits may alias logits.
template <int V>
__global__ void __launch_bounds__(kThreads) backward_kernel(BackwardArgs a) {
  const int64_t r = blockIdx.x;
  const float* z = a.logits + r * a.cols;
  const int64_t t = a.targets ? a.targets[r] : -1;
  const float gl = a.dlogp && t >= 0 ? a.dlogp[r] : 0.f;  // a masked row's logp is the constant 0
  const float ge = a.dent ? a.dent[r] : 0.f, H = a.entropy ? a.entropy[r] : 0.f;
  const float l = a.lse[r];
  const int64_t target = t - a.col0;  // its column in the block (negative: none)
  for (int64_t g = threadIdx.x; g < a.cols / V; g += blockDim.x) {
    const Group<V> zg = load_group<V>(z, g);
    Group<V> d;
    for (int j = 0; j < V; j++) {
      const float lp = zg.v[j] * a.inv_temp - l, p = expf(lp);
      d.v[j] = (-gl * p - ge * p * (lp + H)) * a.inv_temp;
      if (g * V + j == target) d.v[j] += gl * a.inv_temp;
    }
    if (a.dlogits16)
      store_group<V>(a.dlogits16 + r * a.cols, g, d);
    else
      store_group<V>(a.dlogits + r * a.cols, g, d);
  }
}

// Whether the four-value kernels take a call's block of columns.
inline bool stats_quads_fit(const StatsArgs& a) { return a.cols % 4 == 0 && quads_fit({a.logits}, {}); }
inline bool backward_quads_fit(const BackwardArgs& a) {
  return a.cols % 4 == 0 && quads_fit({a.logits, a.dlogits}, {a.dlogits16});
}

}  // namespace azr::kernels::cuda_detail::token_stats_kernels
