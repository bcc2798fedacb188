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
// The kernels are in this header, apart from their launches (token_stats.cu), so that
// tests/kernels/token_stats_emulated_test.cpp also runs them on the CPU through
// tests/kernels/cuda_emulation.h.
#pragma once

#include <cmath>
#include <cstdint>

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

__global__ void __launch_bounds__(kThreads) stats_kernel(StatsArgs a) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const float* z = a.logits + r * a.cols;
  float m = -INFINITY, s = 0.f, w = 0.f;
  for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) online_add(z[j] * a.inv_temp, m, s, w);
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

struct BackwardArgs {
  float* dlogits;
  const float *logits, *lse, *entropy, *dlogp, *dent;
  const int32_t* targets;
  int64_t col0, cols;
  float inv_temp;
};

// Each element is read and written by the same thread, so dlogits may alias logits.
__global__ void __launch_bounds__(kThreads) backward_kernel(BackwardArgs a) {
  const int64_t r = blockIdx.x;
  const float* z = a.logits + r * a.cols;
  float* dz = a.dlogits + r * a.cols;
  const int64_t t = a.targets ? a.targets[r] : -1;
  const float gl = a.dlogp && t >= 0 ? a.dlogp[r] : 0.f;  // a masked row's logp is the constant 0
  const float ge = a.dent ? a.dent[r] : 0.f, H = a.entropy ? a.entropy[r] : 0.f;
  const float l = a.lse[r];
  const int64_t target = t - a.col0;  // its column in the block (negative: none)
  for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
    const float lp = z[j] * a.inv_temp - l, p = expf(lp);
    float g = (-gl * p - ge * p * (lp + H)) * a.inv_temp;
    if (j == target) g += gl * a.inv_temp;
    dz[j] = g;
  }
}

}  // namespace azr::kernels::cuda_detail::token_stats_kernels
