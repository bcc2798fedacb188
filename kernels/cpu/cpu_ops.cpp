// The CPU backend of the op table (kernels/ops.h): GEMMs through OpenBLAS, everything else as
// OpenMP loops. The OpenMP build of OpenBLAS runs single-threaded when called from inside a
// parallel region, so attention can parallelise over (sequence, head) and call sgemm per block
// without oversubscribing the cores.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "kernels/cpu/attention_decode.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/sampling.h"
#include "kernels/ops.h"

namespace azr::kernels {
namespace {

// Below this many elements an op runs on one thread: a parallel region's fork/join costs
// microseconds, and far more when another process holds a core (a descheduled thread stalls the
// barrier), which is the normal case during generation next to the sandbox workers.
constexpr int64_t kParallelMin = int64_t(1) << 16;
// The same for OpenBLAS: a GEMM below this many multiply-adds runs on the calling thread, unless
// its B operand (the weights, in a decode step's GEMV-like product) is large enough that memory
// bandwidth, which a second core adds, dominates. The OpenMP build of OpenBLAS follows
// omp_get_max_threads(), so lowering it for one call is enough.
constexpr double kGemmParallelMin = double(1 << 22);
constexpr double kGemmBandwidthMin = double(1 << 18);

// cblas_sgemm (row-major), single-threaded when small.
void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const bool serial = double(M) * double(N) * double(K) < kGemmParallelMin && double(N) * double(K) < kGemmBandwidthMin &&
                      !omp_in_parallel();
  const int saved = serial ? omp_get_max_threads() : 0;
  if (serial) omp_set_num_threads(1);
  cblas_sgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
  if (serial) omp_set_num_threads(saved);
}

// Grow-only per-thread scratch, so the hot loops never allocate.
float* scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

void embedding_forward(float* out, const int32_t* ids, const float* wte, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; n++) std::memcpy(out + n * C, wte + int64_t(ids[n]) * C, sizeof(float) * C);
}

void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int64_t N, int64_t C) {
  // Rows may repeat ids, so threads split the columns, not the rows.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t blk = 0; blk < blocks; blk++) {
    const int64_t c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int64_t n = 0; n < N; n++) {
      float* dst = dwte + int64_t(ids[n]) * C;
      const float* src = dout + n * C;
      for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
    }
  }
}

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; n++) {
    const float* xr = x + n * C;
    float ss = 0.f;
    for (int64_t c = 0; c < C; c++) ss += xr[c] * xr[c];
    const float r = 1.f / std::sqrt(ss / float(C) + eps);
    rstd[n] = r;
    float* o = out + n * C;
    for (int64_t c = 0; c < C; c++) o[c] = xr[c] * r * w[c];
  }
}

// y = x r w with r = (mean(x^2) + eps)^-1/2:
//   dx = r (dy w) - x r^3 / C * sum(dy w x),   dw = sum over rows of dy x r.
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd,
                      int64_t N, int64_t C) {
  const int threads = omp_get_max_threads();
  std::vector<float> partial(size_t(threads) * C, 0.f);
#pragma omp parallel if (N * C >= kParallelMin)
  {
    float* dw_local = partial.data() + size_t(omp_get_thread_num()) * C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; n++) {
      const float* xr = x + n * C;
      const float* dy = dout + n * C;
      const float r = rstd[n];
      float dot = 0.f;
      for (int64_t c = 0; c < C; c++) dot += dy[c] * w[c] * xr[c];
      const float k = dot * r * r * r / float(C);
      float* dxr = dx + n * C;
      for (int64_t c = 0; c < C; c++) {
        dxr[c] += dy[c] * w[c] * r - xr[c] * k;
        dw_local[c] += dy[c] * xr[c] * r;
      }
    }
  }
  for (int t = 0; t < threads; t++)
    for (int64_t c = 0; c < C; c++) dw[c] += partial[size_t(t) * C + c];
}

void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IC,
                    int64_t OC) {
  if (bias) {
#pragma omp parallel for schedule(static) if (N * OC >= kParallelMin)
    for (int64_t n = 0; n < N; n++) std::memcpy(out + n * OC, bias, sizeof(float) * OC);
  }
  sgemm(CblasNoTrans, CblasTrans, N, OC, IC, 1.f, inp, IC, w, IC, bias ? 1.f : 0.f, out, OC);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int64_t IC, int64_t OC) {
  if (dinp)  // [N, IC] += [N, OC] [OC, IC]
    sgemm(CblasNoTrans, CblasNoTrans, N, IC, OC, 1.f, dout, OC, w, IC, 1.f, dinp, IC);
  if (dw)  // [OC, IC] += [N, OC]^T [N, IC]
    sgemm(CblasTrans, CblasNoTrans, OC, IC, N, 1.f, dout, OC, inp, IC, 1.f, dw, IC);
  if (dbias) {
    const int threads = omp_get_max_threads();
    std::vector<float> partial(size_t(threads) * OC, 0.f);
#pragma omp parallel if (N * OC >= kParallelMin)
    {
      float* local = partial.data() + size_t(omp_get_thread_num()) * OC;
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OC; o++) local[o] += dout[n * OC + o];
    }
    for (int t = 0; t < threads; t++)
      for (int64_t o = 0; o < OC; o++) dbias[o] += partial[size_t(t) * OC + o];
  }
}

template <int Sign>
void rope_rotate(float* x, const int32_t* pos, const float* cos, const float* sin, int64_t N, int64_t heads,
                 int64_t d) {
  const int64_t half = d / 2;
#pragma omp parallel for schedule(static) if (N * heads * d >= kParallelMin)
  for (int64_t n = 0; n < N; n++) {
    const float* c = cos + int64_t(pos[n]) * half;
    const float* s = sin + int64_t(pos[n]) * half;
    for (int64_t h = 0; h < heads; h++) {
      float* v = x + (n * heads + h) * d;
      for (int64_t i = 0; i < half; i++) {
        const float x1 = v[i], x2 = v[i + half];
        const float si = Sign * s[i];
        v[i] = x1 * c[i] - x2 * si;
        v[i + half] = x2 * c[i] + x1 * si;
      }
    }
  }
}

void rope_forward(float* x, const int32_t* pos, const float* cos, const float* sin, int64_t N, int64_t heads,
                  int64_t d) {
  rope_rotate<1>(x, pos, cos, sin, N, heads, d);
}
void rope_backward(float* dx, const int32_t* pos, const float* cos, const float* sin, int64_t N, int64_t heads,
                   int64_t d) {
  rope_rotate<-1>(dx, pos, cos, sin, N, heads, d);
}

// A dot product over 8 independent partial sums. Without -ffast-math the compiler keeps a plain
// `acc += a[i] * b[i]` loop in source order, one dependent add after another (scalar, bound by add
// latency); the 8 lanes vectorise and run in parallel. Attention's backward uses it for
// rowsum(dout * out).
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; u++) acc[u] += a[i + u] * b[i + u];
  float r = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; i++) r += a[i] * b[i];
  return r;
}

int64_t seq_len(const AttentionShape& s, int64_t b) { return s.lengths ? s.lengths[b] : s.T; }

// Causal attention works on blocks of kAttnBlock query rows: rows t0..t1-1 see keys 0..t1-1 only,
// so each block multiplies against that prefix and the GEMMs cover about half of the T x T square
// (plus half a block per row of waste on the diagonal) instead of all of it. The block's scores,
// kAttnBlock x T at most, are per-thread scratch: no T x T matrix exists, and at long T the block
// stays in L2 between the score GEMM, the softmax and the P v GEMM. Smaller blocks waste less
// on the diagonal but make skinnier GEMMs; with head dims of 32-128, 64 rows keep sgemm efficient.
// tests/model/transformer_test.cpp has a case with T > 4 * kAttnBlock and a ragged last block.
constexpr int64_t kAttnBlock = 64;

int64_t attn_blocks(int64_t T) { return (T + kAttnBlock - 1) / kAttnBlock; }

// Per (sequence, head, query block): S = scale q k^T over the visible keys (one GEMM; only the
// diagonal tile's upper triangle is wasted, and BLAS is still far faster than per-row dot
// products), causal softmax row by row, out = P v. Blocks are independent (each writes its own
// output rows), so they parallelise too, which keeps all cores busy even for B * heads < cores.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& s) {
  const int64_t B = s.B, T = s.T, H = s.heads, d = s.d, group = s.heads / s.kv_heads;
  const int64_t q_row = H * d, kv_row = s.kv_heads * d;
  const int64_t nblk = attn_blocks(T);
  const float scale = 1.f / std::sqrt(float(d));
#pragma omp parallel if (B * T * T * H * d >= kParallelMin)
  {
    static thread_local std::vector<float> buf;
#pragma omp for schedule(dynamic, 1) collapse(3)
    for (int64_t b = 0; b < B; b++) {
      for (int64_t h = 0; h < H; h++) {
        for (int64_t i = 0; i < nblk; i++) {
          // Last block first: the late blocks see the most keys, so the dynamic schedule hands out
          // the big tasks early and the small ones fill the gaps at the end.
          const int64_t t0 = (nblk - 1 - i) * kAttnBlock, t1 = std::min(T, t0 + kAttnBlock);
          const int64_t L = seq_len(s, b), e = std::min(t1, L);  // real rows t0..e-1, keys 0..e-1
          float* o = out + b * T * q_row + h * d;
          float* lse_bh = lse + (b * H + h) * T;
          for (int64_t t = std::max(t0, e); t < t1; t++) {
            std::memset(o + t * q_row, 0, sizeof(float) * d);
            lse_bh[t] = 0.f;
          }
          if (e <= t0) continue;
          const int64_t M = e - t0, n = e;
          const float* qb = q + b * T * q_row + h * d + t0 * q_row;
          const float* kb = k + b * s.kv_seq_stride + (h / group) * d;
          const float* vb = v + b * s.kv_seq_stride + (h / group) * d;
          float* S = scratch(buf, size_t(M * n));
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(n), int(d), scale, qb, int(q_row), kb,
                      int(kv_row), 0.f, S, int(n));
          for (int64_t r = 0; r < M; r++) {
            const int64_t t = t0 + r;
            float* row = S + r * n;
            const float mx = cpu_detail::max_of(row, t + 1);
            const float sum = cpu_detail::exp_shifted_sum(row, t + 1, mx);
            const float inv = 1.f / sum;
            for (int64_t j = 0; j <= t; j++) row[j] *= inv;
            for (int64_t j = t + 1; j < n; j++) row[j] = 0.f;
            lse_bh[t] = mx + std::log(sum);
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(d), int(n), 1.f, S, int(n), vb,
                      int(kv_row), 0.f, o + t0 * q_row, int(q_row));
        }
      }
    }
  }
}

// Row t of a query block in backward: p[j] = exp(s_j - lse_t) over its m visible keys (the
// scores s in, the probabilities out) and dp[j] = p[j] (dp[j] - D), in lanes.
void probabilities_and_score_grads(float* p, float* dp, int64_t m, float lse_t, float D) {
  using cpu_detail::kLanes, cpu_detail::load4, cpu_detail::store4, cpu_detail::f32x4;
  int64_t j = 0;
  for (; j + kLanes <= m; j += kLanes) {
    const f32x4 pv = cpu_detail::exp_of(load4(p + j) - lse_t);
    store4(p + j, pv);
    store4(dp + j, pv * (load4(dp + j) - D));
  }
  for (; j < m; j++) {
    p[j] = cpu_detail::fast_exp(p[j] - lse_t);
    dp[j] = p[j] * (dp[j] - D);
  }
}

// Per (sequence, kv head), so the heads of a GQA group and the query blocks, which all add into
// the same dk/dv rows, accumulate without races. Each query block recomputes its slice of P from
// the saved lse against the keys it sees (as in forward). dS = P * (dP - rowsum(dout * out)).
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, const AttentionShape& s) {
  const int64_t B = s.B, T = s.T, H = s.heads, KV = s.kv_heads, d = s.d, group = H / KV;
  const int64_t q_row = H * d, kv_row = KV * d;
  const float scale = 1.f / std::sqrt(float(d));
#pragma omp parallel if (B * T * T * H * d >= kParallelMin)
  {
    static thread_local std::vector<float> pbuf, dpbuf;
#pragma omp for schedule(dynamic, 1) collapse(2)
    for (int64_t b = 0; b < B; b++) {
      for (int64_t g = 0; g < KV; g++) {
        const int64_t L = seq_len(s, b);
        float* dkb = dk + b * s.kv_seq_stride + g * d;
        float* dvb = dv + b * s.kv_seq_stride + g * d;
        for (int64_t t = 0; t < T; t++) {
          std::memset(dkb + t * kv_row, 0, sizeof(float) * d);
          std::memset(dvb + t * kv_row, 0, sizeof(float) * d);
        }
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
          float* dqb = dq + b * T * q_row + h * d;
          for (int64_t t = L; t < T; t++) std::memset(dqb + t * q_row, 0, sizeof(float) * d);
        }
        if (L == 0) continue;
        const float* kb = k + b * s.kv_seq_stride + g * d;
        const float* vb = v + b * s.kv_seq_stride + g * d;
        const int64_t rows = std::min(L, kAttnBlock);
        float* P = scratch(pbuf, size_t(rows * L));
        float* dP = scratch(dpbuf, size_t(rows * L));
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
          const float* lse_bh = lse + (b * H + h) * T;
          for (int64_t t0 = 0; t0 < L; t0 += kAttnBlock) {
            const int64_t e = std::min(L, t0 + kAttnBlock), M = e - t0, n = e;  // rows t0..e-1, keys 0..e-1
            const int64_t off = b * T * q_row + h * d + t0 * q_row;
            const float* qb = q + off;
            const float* ob = out + off;
            const float* dob = dout + off;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(n), int(d), scale, qb, int(q_row), kb,
                        int(kv_row), 0.f, P, int(n));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(n), int(d), 1.f, dob, int(q_row), vb,
                        int(kv_row), 0.f, dP, int(n));
            for (int64_t r = 0; r < M; r++) {
              const int64_t t = t0 + r;
              float* p = P + r * n;
              float* dp = dP + r * n;
              const float* o_t = ob + r * q_row;
              const float* do_t = dob + r * q_row;
              const float D = dot(do_t, o_t, d);
              probabilities_and_score_grads(p, dp, t + 1, lse_bh[t], D);
              for (int64_t j = t + 1; j < n; j++) p[j] = dp[j] = 0.f;
            }
            // dq = scale dS k; dk += scale dS^T q; dv += P^T dout (keys 0..e-1 only: the rest got
            // no probability from these rows)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(d), int(n), scale, dP, int(n), kb,
                        int(kv_row), 0.f, dq + off, int(q_row));
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(n), int(d), int(M), scale, dP, int(n), qb,
                        int(q_row), 1.f, dkb, int(kv_row));
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(n), int(d), int(M), 1.f, P, int(n), dob,
                        int(q_row), 1.f, dvb, int(kv_row));
          }
        }
      }
    }
  }
}

void attention_decode(float* out, const float* q, const float* kcache, const float* vcache, const int32_t* slot,
                      const int32_t* pos, int64_t R, const AttentionShape& s) {
  cpu_detail::attention_decode_rows(out, q, kcache, vcache, slot, pos, R, s, 16 * kParallelMin);
}

// SwiGLU in lanes of cpu_detail::exp_of: F is a float or a vector of them, the same arithmetic.
template <class F>
F swiglu_of(F g, F up) {
  return g / (1.f + cpu_detail::exp_of(-g)) * up;
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  using cpu_detail::kLanes;
  const int64_t vecs = n / kLanes;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < vecs; c++) {
    const int64_t i = c * kLanes;
    cpu_detail::store4(out + i, swiglu_of(cpu_detail::load4(gate + i), cpu_detail::load4(up + i)));
  }
  for (int64_t i = vecs * kLanes; i < n; i++) out[i] = swiglu_of(gate[i], up[i]);
}

// silu(g) = g sigma(g); silu'(g) = sigma(g) (1 + g (1 - sigma(g))).
template <class F>
void swiglu_grads_of(F& dgate, F& dup, F dy, F g, F up) {
  const F sig = 1.f / (1.f + cpu_detail::exp_of(-g));
  dup = dy * g * sig;
  dgate = dy * up * sig * (1.f + g * (1.f - sig));
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
  using cpu_detail::kLanes, cpu_detail::load4, cpu_detail::f32x4;
  const int64_t vecs = n / kLanes;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < vecs; c++) {
    const int64_t i = c * kLanes;
    f32x4 dg, du;
    swiglu_grads_of(dg, du, load4(dout + i), load4(gate + i), load4(up + i));
    cpu_detail::store4(dgate + i, dg);
    cpu_detail::store4(dup + i, du);
  }
  for (int64_t i = vecs * kLanes; i < n; i++) swiglu_grads_of(dgate[i], dup[i], dout[i], gate[i], up[i]);
}

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// One block of columns per call (ops.h). Within the block, as over a whole row: the maximum in
// float, then sum e^(z - max) and sum e^(z - max) (z - max) in double; a later block's sums join
// the running ones rescaled to the larger maximum. Over one block the result is the single pass's
// bit for bit (the merge is skipped), so splitting the vocabulary changes the statistics only by
// the rounding of the rescaling.
void token_stats(float* lse, float* logp, float* entropy, double* state, const float* logits, const int32_t* targets,
                 int64_t n, int64_t col0, int64_t cols, int64_t V, float inv_temp) {
  const bool first = col0 == 0, last = col0 + cols == V;
#pragma omp parallel for schedule(static) if (n * cols >= kParallelMin)
  for (int64_t r = 0; r < n; r++) {
    const float* z = logits + r * cols;
    float mx = -INFINITY;
    for (int64_t j = 0; j < cols; j++) mx = std::max(mx, z[j] * inv_temp);
    double sum = 0.0, wsum = 0.0;
    for (int64_t j = 0; j < cols; j++) {
      const float zj = z[j] * inv_temp - mx;
      const float e = std::exp(zj);
      sum += e;
      wsum += double(e) * zj;
    }
    const int64_t t = targets ? targets[r] : -1;
    double m = mx, target_z = t >= col0 && t < col0 + cols ? double(z[t - col0] * inv_temp) : 0.0;
    if (!first) {  // join the running sums of the earlier blocks
      const double* st = state + 4 * r;
      const double M = std::max(st[0], m), a = std::exp(st[0] - M), b = std::exp(m - M);
      wsum = a * (st[2] + (st[0] - M) * st[1]) + b * (wsum + (m - M) * sum);
      sum = a * st[1] + b * sum;
      m = M;
      if (!(t >= col0 && t < col0 + cols)) target_z = st[3];
    }
    if (!last) {
      double* st = state + 4 * r;
      st[0] = m, st[1] = sum, st[2] = wsum, st[3] = target_z;
      continue;
    }
    const float l = float(m) + float(std::log(sum));
    lse[r] = l;
    if (logp) logp[r] = t >= 0 ? float(target_z) - l : 0.f;
    if (entropy) entropy[r] = float(std::log(sum) - wsum / sum);
  }
}

// d logp_t / dz_j = [j == t] - p_j;  d H / dz_j = -p_j (log p_j + H);  z = logits * inv_temp.
void token_stats_backward(float* dlogits, const float* logits, const int32_t* targets, const float* lse,
                          const float* entropy, const float* dlogp, const float* dent, int64_t n, int64_t col0,
                          int64_t cols, float inv_temp) {
#pragma omp parallel for schedule(static) if (n * cols >= kParallelMin)
  for (int64_t r = 0; r < n; r++) {
    const float* z = logits + r * cols;
    float* dz = dlogits + r * cols;
    const int64_t t = targets ? targets[r] : -1;
    const float gl = dlogp && t >= 0 ? dlogp[r] : 0.f;  // a masked row's logp is the constant 0
    const float ge = dent ? dent[r] : 0.f;
    const float H = entropy ? entropy[r] : 0.f;
    const float l = lse[r];
    for (int64_t j = 0; j < cols; j++) {
      const float lp = z[j] * inv_temp - l;
      const float p = std::exp(lp);
      dz[j] = (-gl * p - ge * p * (lp + H)) * inv_temp;
    }
    if (t >= col0 && t < col0 + cols) dz[t - col0] += gl * inv_temp;
  }
}

// Rows are independent; a filtered row sorts its vocabulary, so rows are handed out dynamically.
void sample_rows(int32_t* tokens, float* logprobs, const float* logits, const double* u, int64_t R, int64_t V,
                 int64_t V_limit, float temperature, int32_t top_k, float top_p) {
#pragma omp parallel for schedule(dynamic, 1) if (R * V_limit >= kParallelMin)
  for (int64_t r = 0; r < R; r++)
    tokens[r] = sample_row(logits + r * V, V_limit, temperature, top_k, top_p, u[r], &logprobs[r]);
}

double sum_squares(const float* x, int64_t n) {
  double total = 0.0;
#pragma omp parallel for schedule(static) if (n >= kParallelMin) reduction(+ : total)
  for (int64_t i = 0; i < n; i++) total += double(x[i]) * x[i];
  return total;
}

void scale(float* x, float factor, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; i++) x[i] *= factor;
}

void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
           float weight_decay, float bc1, float bc2, float grad_scale) {
  const float step_size = lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  const float decay = 1.f - lr * weight_decay;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; i++) {
    const float gi = g[i] * grad_scale;  // rounded to fp32 here, as scale() stores it
    p[i] *= decay;
    m[i] = beta1 * m[i] + (1.f - beta1) * gi;
    v[i] = beta2 * v[i] + (1.f - beta2) * gi * gi;
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
  }
}

void* alloc_zeroed(size_t bytes) {
  void* p = std::calloc(std::max<size_t>(bytes, 1), 1);
  if (!p) throw std::bad_alloc();
  return p;
}
void release(void* p) { std::free(p); }
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
// The CPU's ops have run by the time they return, so a download is done when it starts.
int64_t download_start(void* host, const void* src, size_t bytes) {
  copy_bytes(host, src, bytes);
  return 0;
}
void download_wait(int64_t) {}
void fill_zero(float* x, int64_t n) {
  if (n > 0) std::memset(x, 0, sizeof(float) * size_t(n));
}

void gather_rows(float* out, const float* src, const int32_t* rows, int64_t n, int64_t C) {
  for (int64_t i = 0; i < n; i++) std::memcpy(out + i * C, src + int64_t(rows[i]) * C, sizeof(float) * C);
}

void kv_store(float* kcache, float* vcache, const float* k, const float* v, const int32_t* slot, const int32_t* pos,
              int64_t R, int64_t row, int64_t slot_stride) {
  for (int64_t r = 0; r < R; r++) {
    if (pos[r] < 0) continue;
    const int64_t at = int64_t(slot[r]) * slot_stride + int64_t(pos[r]) * row;
    std::memcpy(kcache + at, k + r * row, sizeof(float) * size_t(row));
    std::memcpy(vcache + at, v + r * row, sizeof(float) * size_t(row));
  }
}

void scatter_add_rows(float* dst, const float* src, const int32_t* rows, int64_t n, int64_t C) {
#pragma omp parallel for schedule(static) if (n * C >= kParallelMin)
  for (int64_t i = 0; i < n; i++) {
    float* d = dst + int64_t(rows[i]) * C;
    const float* s = src + i * C;
    for (int64_t c = 0; c < C; c++) d[c] += s[c];
  }
}

const Ops kCpuOps = {
    "cpu",
    /*host_memory=*/true,
    alloc_zeroed,
    release,
    copy_bytes,
    copy_bytes,
    download_start,
    download_wait,
    copy_bytes,
    fill_zero,
    gather_rows,
    scatter_add_rows,
    embedding_forward,
    embedding_backward,
    rmsnorm_forward,
    rmsnorm_backward,
    matmul_forward,
    matmul_backward,
    rope_forward,
    rope_backward,
    attention_forward,
    attention_backward,
    attention_decode,
    kv_store,
    swiglu_forward,
    swiglu_backward,
    add,
    token_stats,
    token_stats_backward,
    sample_rows,
    sum_squares,
    scale,
    adamw,
    /*to_bf16=*/nullptr,
    /*matmul_forward_w16=*/nullptr,
    /*matmul_backward_w16=*/nullptr,
    /*kv_store_w16=*/nullptr,
    /*attention_decode_w16=*/nullptr,
    /*rmsnorm_forward_w16=*/nullptr,
    /*matmul_forward_a16w16=*/nullptr,
    /*matmul_backward_a16w16=*/nullptr,
    /*matmul_forward_o16=*/nullptr,
    /*residual_rmsnorm_forward_w16=*/nullptr,
    /*swiglu_forward_w16=*/nullptr,
    /*decode_qkv_w16=*/nullptr,
    /*gate_up_swiglu_w16=*/nullptr,
    /*rope_kv_store_w16=*/nullptr,
    /*swiglu_rows_w16=*/nullptr,
    /*decode_linear_w16=*/nullptr,
    /*decode_layers_w16=*/nullptr,
    /*swiglu_backward_w16=*/nullptr,
    /*matmul_backward_g16=*/nullptr,
    /*matmul_backward_g16_dinp16=*/nullptr,
    /*adamw_w16=*/nullptr,
    /*rmsnorm_backward_w16=*/nullptr,
    /*token_stats_backward_w16=*/nullptr,
    /*rope_round_qkv_w16=*/nullptr,
    /*attention_forward_w16=*/nullptr,
    /*attention_backward_w16=*/nullptr,
    /*rope_backward_round_w16=*/nullptr,
    /*swiglu_rows_backward_w16=*/nullptr,
    /*recorder=*/{},
};

}  // namespace

const Ops& cpu_ops() { return kCpuOps; }

void set_cpu_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int cpu_threads() { return omp_get_max_threads(); }

}  // namespace azr::kernels
