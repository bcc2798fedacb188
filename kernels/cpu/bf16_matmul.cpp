// The CPU backend's MatmulPrecision::Bf16 table: round the operands of each product to bf16 in
// scratch copies, then run the fp32 GEMM on them; attention likewise on rounded queries, keys and values,
// and the KV cache in bf16. A product of two bf16 values is exact in fp32
// (8 + 8 significant bits fit in 24), so this is the tensor cores' arithmetic up to the order of
// the fp32 sums: the reference the CUDA backend's bf16 GEMMs are checked against.
#include "kernels/cpu/bf16_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/attention_decode.h"
#include "kernels/ops.h"

namespace azr::kernels {

float round_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    bits = (bits | 0x00400000u) & 0xFFFF0000u;  // NaN: keep sign and top payload, make it quiet
  } else {
    bits += 0x7FFFu + ((bits >> 16) & 1u);  // round half to even on the 16 bits dropped
    bits &= 0xFFFF0000u;
  }
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

namespace {

constexpr int64_t kParallelMin = 1 << 15;

// Scratch per thread that calls an op (the trainer runs ops from one thread); grown, never shrunk.
struct Scratch {
  std::vector<float> a, b;
};
thread_local Scratch t_scratch;

const float* rounded(std::vector<float>& dst, const float* src, int64_t n) {
  dst.resize(size_t(n));
  float* d = dst.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; i++) d[i] = round_to_bf16(src[i]);
  return d;
}

// bf16 bit patterns back to the fp32 values they stand for (exact).
const float* widened(std::vector<float>& dst, const uint16_t* src, int64_t n) {
  dst.resize(size_t(n));
  float* d = dst.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; i++) d[i] = cpu_detail::kv_value(src[i]);
  return d;
}

void to_bf16(uint16_t* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; i++) {
    const float r = round_to_bf16(src[i]);
    uint32_t bits;
    std::memcpy(&bits, &r, sizeof bits);
    dst[i] = uint16_t(bits >> 16);
  }
}

// The fp32 GEMMs on rounded operands. `input` and `weight` give the activation and the weight
// operand as bf16 values in fp32, into the scratch vector each is handed: rounded from fp32, or
// widened from bf16.
auto rounding(const float* x, int64_t n) {
  return [x, n](std::vector<float>& s) { return rounded(s, x, n); };
}
auto widening(const uint16_t* x16, int64_t n) {
  return [x16, n](std::vector<float>& s) { return widened(s, x16, n); };
}

template <class Input, class Weight>
void forward(float* out, Input input, Weight weight, const float* bias, int64_t N, int64_t IC, int64_t OC) {
  cpu_ops().matmul_forward(out, input(t_scratch.a), weight(t_scratch.b), bias, N, IC, OC);
}

template <class Input, class Weight>
void backward(float* dinp, float* dw, float* dbias, const float* dout, Input input, Weight weight, int64_t N,
              int64_t IC, int64_t OC) {
  const Ops& fp32 = cpu_ops();
  if (dinp || dw) {
    // dout is needed by both products: keep its rounding in `a`, and the other operand in `b`.
    const float* dout16 = rounded(t_scratch.a, dout, N * OC);
    if (dinp) fp32.matmul_backward(dinp, nullptr, nullptr, dout16, nullptr, weight(t_scratch.b), N, IC, OC);
    if (dw) fp32.matmul_backward(nullptr, dw, nullptr, dout16, input(t_scratch.b), nullptr, N, IC, OC);
  }
  if (dbias) fp32.matmul_backward(nullptr, nullptr, dbias, dout, nullptr, nullptr, N, IC, OC);
}

void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IC,
                    int64_t OC) {
  forward(out, rounding(inp, N * IC), rounding(w, OC * IC), bias, N, IC, OC);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                     int64_t N, int64_t IC, int64_t OC) {
  backward(dinp, dw, dbias, dout, rounding(inp, N * IC), rounding(w, OC * IC), N, IC, OC);
}

void matmul_forward_w16(float* out, const float* inp, const uint16_t* w16, const float* bias, int64_t N, int64_t IC,
                        int64_t OC) {
  forward(out, rounding(inp, N * IC), widening(w16, OC * IC), bias, N, IC, OC);
}

void matmul_backward_w16(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                         const uint16_t* w16, int64_t N, int64_t IC, int64_t OC) {
  backward(dinp, dw, dbias, dout, rounding(inp, N * IC), widening(w16, OC * IC), N, IC, OC);
}

void matmul_forward_a16w16(float* out, const uint16_t* inp16, const uint16_t* w16, const float* bias, int64_t N,
                           int64_t IC, int64_t OC) {
  forward(out, widening(inp16, N * IC), widening(w16, OC * IC), bias, N, IC, OC);
}

void matmul_backward_a16w16(float* dinp, float* dw, float* dbias, const float* dout, const uint16_t* inp16,
                            const uint16_t* w16, int64_t N, int64_t IC, int64_t OC) {
  backward(dinp, dw, dbias, dout, widening(inp16, N * IC), widening(w16, OC * IC), N, IC, OC);
}

// The fp32 product through scratch, then rounded: the bits a to_bf16 pass after
// matmul_forward_a16w16 writes (the GPU's GEMM rounds in its epilogue, from the same fp32 sums up
// to their order).
void matmul_forward_o16(uint16_t* out16, const uint16_t* inp16, const uint16_t* w16, int64_t N, int64_t IC,
                        int64_t OC) {
  static thread_local std::vector<float> out;
  out.resize(size_t(N * OC));
  matmul_forward_a16w16(out.data(), inp16, w16, nullptr, N, IC, OC);
  to_bf16(out16, out.data(), N * OC);
}

void rmsnorm_forward_w16(float* out, uint16_t* out16, float* rstd, const float* x, const float* w, int64_t N,
                         int64_t C, float eps) {
  if (out) {
    cpu_ops().rmsnorm_forward(out, rstd, x, w, N, C, eps);
    to_bf16(out16, out, N * C);
    return;
  }
  // The fp32 rows nobody reads, whole rows at a time through scratch (each row's norm is its own:
  // the same values), about 4 MB held.
  const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(C, 1));
  static thread_local std::vector<float> y;
  y.resize(size_t(std::min(N, rows) * C));
  for (int64_t r = 0; r < N; r += rows) {
    const int64_t n = std::min(rows, N - r);
    cpu_ops().rmsnorm_forward(y.data(), rstd + r, x + r * C, w, n, C, eps);
    to_bf16(out16 + r * C, y.data(), n * C);
  }
}

void residual_rmsnorm_forward_w16(float* res_out, float* out, uint16_t* out16, float* rstd, const float* x,
                                  const float* delta, const float* w, int64_t N, int64_t C, float eps) {
  cpu_ops().add(res_out, x, delta, N * C);
  rmsnorm_forward_w16(out, out16, rstd, res_out, w, N, C, eps);
}

void swiglu_forward_w16(float* out, uint16_t* out16, const float* gate, const float* up, int64_t n) {
  if (out) {
    cpu_ops().swiglu_forward(out, gate, up, n);
    to_bf16(out16, out, n);
    return;
  }
  // The fp32 result nobody reads, a chunk at a time in scratch: the same values (chunks of whole
  // 4-lane vectors leave the vector and tail split of swiglu_forward as it was), 4 MB held.
  constexpr int64_t kChunk = int64_t(1) << 20;
  static thread_local std::vector<float> y;
  y.resize(size_t(std::min(n, kChunk)));
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    cpu_ops().swiglu_forward(y.data(), gate + i, up + i, len);
    to_bf16(out16 + i, y.data(), len);
  }
}

// swiglu_backward's values, then rounded: a chunk at a time through scratch, as the forward's.
void swiglu_backward_w16(uint16_t* dgate16, uint16_t* dup16, const float* dout, const float* gate, const float* up,
                         int64_t n) {
  constexpr int64_t kChunk = int64_t(1) << 20;
  static thread_local std::vector<float> dg, du;
  dg.resize(size_t(std::min(n, kChunk)));
  du.resize(dg.size());
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    cpu_ops().swiglu_backward(dg.data(), du.data(), dout + i, gate + i, up + i, len);
    to_bf16(dgate16 + i, dg.data(), len);
    to_bf16(dup16 + i, du.data(), len);
  }
}

// rmsnorm_backward, then the updated dx rounded: the bits a to_bf16 pass after it writes.
void rmsnorm_backward_w16(float* dx, uint16_t* dx16, float* dw, const float* dout, const float* x, const float* w,
                          const float* rstd, int64_t N, int64_t C) {
  cpu_ops().rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
  if (dx16) to_bf16(dx16, dx, N * C);
}

// token_stats_backward's values, then rounded: whole rows at a time through scratch (about 4 MB).
void token_stats_backward_w16(uint16_t* dlogits16, const float* logits, const int32_t* targets, const float* lse,
                              const float* entropy, const float* dlogp, const float* dent, int64_t n, int64_t col0,
                              int64_t cols, float inv_temp) {
  if (n == 0 || cols == 0) return;
  const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 20) / cols);
  static thread_local std::vector<float> dz;
  dz.resize(size_t(std::min(n, rows) * cols));
  auto at = [](const auto* p, int64_t r) { return p ? p + r : nullptr; };
  for (int64_t r0 = 0; r0 < n; r0 += rows) {
    const int64_t len = std::min(rows, n - r0);
    cpu_ops().token_stats_backward(dz.data(), logits + r0 * cols, at(targets, r0), lse + r0, at(entropy, r0),
                                   at(dlogp, r0), at(dent, r0), len, col0, cols, inv_temp);
    to_bf16(dlogits16 + r0 * cols, dz.data(), len * cols);
  }
}

// The fp32 products on the widened operands; a write as a zero fill before the sum, which adds to
// exactly 0 (the same values as a product that writes).
void matmul_backward_g16(float* dinp, float* dw, const uint16_t* dout16, const uint16_t* inp16, const uint16_t* w16,
                         int64_t N, int64_t IC, int64_t OC, GemmWrites writes) {
  if (!dinp && !dw) return;
  const Ops& fp32 = cpu_ops();
  const float* dout = widened(t_scratch.a, dout16, N * OC);
  if (dinp) {
    if (writes & kWriteDinp) fp32.fill_zero(dinp, N * IC);
    fp32.matmul_backward(dinp, nullptr, nullptr, dout, nullptr, widened(t_scratch.b, w16, OC * IC), N, IC, OC);
  }
  if (dw) {
    if (writes & kWriteDw) fp32.fill_zero(dw, OC * IC);
    fp32.matmul_backward(nullptr, dw, nullptr, dout, widened(t_scratch.b, inp16, N * IC), nullptr, N, IC, OC);
  }
}

// dinp through fp32 scratch, then rounded: the bits of matmul_backward_g16's written dinp rounded
// by to_bf16.
void matmul_backward_g16_dinp16(uint16_t* dinp16, float* dw, const uint16_t* dout16, const uint16_t* inp16,
                                const uint16_t* w16, int64_t N, int64_t IC, int64_t OC, GemmWrites writes) {
  if (dinp16) {
    static thread_local std::vector<float> dinp;
    dinp.resize(size_t(N * IC));
    matmul_backward_g16(dinp.data(), nullptr, dout16, nullptr, w16, N, IC, OC, kWriteDinp);
    to_bf16(dinp16, dinp.data(), N * IC);
  }
  matmul_backward_g16(nullptr, dw, dout16, inp16, nullptr, N, IC, OC, writes);
}

void adamw_w16(float* p, uint16_t* p16, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, float bc1, float bc2, float grad_scale) {
  cpu_ops().adamw(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale);
  to_bf16(p16, p, n);
}

// Attention on queries, keys and values rounded to bf16 (the operands a tensor core reads; the
// keys and values are what a bf16 KV cache holds), in fp32. k and v hold B sequences at
// kv_seq_stride.
struct RoundedQkv {
  const float* q;
  const float* k;
  const float* v;
};
thread_local std::vector<float> t_q16, t_k16, t_v16;
RoundedQkv rounded_qkv(const float* q, const float* k, const float* v, const AttentionShape& s) {
  const int64_t n = s.B * s.kv_seq_stride;
  return {rounded(t_q16, q, s.B * s.T * s.heads * s.d), rounded(t_k16, k, n), rounded(t_v16, v, n)};
}

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& s) {
  const RoundedQkv r = rounded_qkv(q, k, v, s);
  cpu_ops().attention_forward(out, lse, r.q, r.k, r.v, s);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, const AttentionShape& s) {
  const RoundedQkv r = rounded_qkv(q, k, v, s);
  cpu_ops().attention_backward(dq, dk, dv, dout, out, lse, r.q, r.k, r.v, s);
}

// The attention's operands in bf16 (ops.h): the ops they stand for, composed. The attention widens
// them and runs the ops above, whose rounding of a bf16 value is the value itself.
thread_local std::vector<float> t_q32, t_k32, t_v32;
thread_local std::vector<uint16_t> t_rows16;

// A part of rows made of parts side by side (a joined GEMM's output: [q | k | v], [gate | up]):
// `width` values at `offset` in each of R rows of `row` values. split_rows copies the parts into
// compact arrays, join_rows back into rows.
template <class T>
struct RowPart {
  T* compact;
  int64_t offset, width;
};
template <class T>
void split_rows(const T* rows, int64_t R, int64_t row, std::initializer_list<RowPart<T>> parts) {
  for (int64_t r = 0; r < R; r++)
    for (const RowPart<T>& p : parts) std::copy_n(rows + r * row + p.offset, p.width, p.compact + r * p.width);
}
template <class T>
void join_rows(T* rows, int64_t R, int64_t row, std::initializer_list<RowPart<T>> parts) {
  for (int64_t r = 0; r < R; r++)
    for (const RowPart<T>& p : parts) std::copy_n(p.compact + r * p.width, p.width, rows + r * row + p.offset);
}

void rope_round_qkv_w16(uint16_t* q16, uint16_t* k16, uint16_t* v16, const float* qkv, const int32_t* pos,
                        const float* cos, const float* sin, int64_t N, int64_t heads, int64_t kv_heads, int64_t d) {
  const int64_t qd = heads * d, kd = kv_heads * d;
  t_q32.resize(size_t(N * qd)), t_k32.resize(size_t(N * kd)), t_v32.resize(size_t(N * kd));
  split_rows<float>(qkv, N, qd + 2 * kd,
                    {{t_q32.data(), 0, qd}, {t_k32.data(), qd, kd}, {t_v32.data(), qd + kd, kd}});
  cpu_ops().rope_forward(t_q32.data(), pos, cos, sin, N, heads, d);
  cpu_ops().rope_forward(t_k32.data(), pos, cos, sin, N, kv_heads, d);
  to_bf16(q16, t_q32.data(), N * qd);
  to_bf16(k16, t_k32.data(), N * kd);
  to_bf16(v16, t_v32.data(), N * kd);
}

void attention_forward_w16(float* out, uint16_t* out16, float* lse, const uint16_t* q16, const uint16_t* k16,
                           const uint16_t* v16, const AttentionShape& s) {
  const int64_t kv = s.B * s.kv_seq_stride;
  attention_forward(out, lse, widened(t_q32, q16, s.B * s.T * s.heads * s.d), widened(t_k32, k16, kv),
                    widened(t_v32, v16, kv), s);
  to_bf16(out16, out, s.B * s.T * s.heads * s.d);
}

void attention_backward_w16(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const uint16_t* q16, const uint16_t* k16, const uint16_t* v16, const AttentionShape& s) {
  const int64_t kv = s.B * s.kv_seq_stride;
  attention_backward(dq, dk, dv, dout, out, lse, widened(t_q32, q16, s.B * s.T * s.heads * s.d),
                     widened(t_k32, k16, kv), widened(t_v32, v16, kv), s);
}

// The bias sums as the unfused path's column sums take them (matmul_backward's dbias), part by
// part: the same bits.
void rope_backward_round_w16(uint16_t* dqkv16, float* dq, float* dk, const float* dv, float* dbias, const int32_t* pos,
                             const float* cos, const float* sin, int64_t N, int64_t heads, int64_t kv_heads,
                             int64_t d) {
  const int64_t qd = heads * d, kd = kv_heads * d;
  cpu_ops().rope_backward(dq, pos, cos, sin, N, heads, d);
  cpu_ops().rope_backward(dk, pos, cos, sin, N, kv_heads, d);
  if (dbias) {
    cpu_ops().matmul_backward(nullptr, nullptr, dbias, dq, nullptr, nullptr, N, 0, qd);
    cpu_ops().matmul_backward(nullptr, nullptr, dbias + qd, dk, nullptr, nullptr, N, 0, kd);
    cpu_ops().matmul_backward(nullptr, nullptr, dbias + qd + kd, dv, nullptr, nullptr, N, 0, kd);
  }
  t_rows16.resize(size_t(N * (qd + 2 * kd)));
  uint16_t *q16 = t_rows16.data(), *k16 = q16 + N * qd, *v16 = k16 + N * kd;
  to_bf16(q16, dq, N * qd);
  to_bf16(k16, dk, N * kd);
  to_bf16(v16, dv, N * kd);
  join_rows<uint16_t>(dqkv16, N, qd + 2 * kd, {{q16, 0, qd}, {k16, qd, kd}, {v16, qd + kd, kd}});
}

void kv_store_w16(uint16_t* kcache, uint16_t* vcache, const float* k, const float* v, const int32_t* slot,
                  const int32_t* pos, int64_t R, int64_t row, int64_t slot_stride) {
#pragma omp parallel for schedule(static) if (R * row >= kParallelMin)
  for (int64_t r = 0; r < R; r++) {
    if (pos[r] < 0) continue;
    const int64_t at = int64_t(slot[r]) * slot_stride + int64_t(pos[r]) * row;
    to_bf16(kcache + at, k + r * row, row);
    to_bf16(vcache + at, v + r * row, row);
  }
}

void attention_decode_w16(float* out, uint16_t* out16, const float* q, const uint16_t* kcache,
                          const uint16_t* vcache, const int32_t* slot, const int32_t* pos, int64_t R,
                          const AttentionShape& s) {
  cpu_detail::attention_decode_rows(out, rounded(t_q16, q, R * s.heads * s.d), kcache, vcache, slot, pos, R, s,
                                    16 * kParallelMin);
  if (out16) to_bf16(out16, out, R * s.heads * s.d);
}

// Decode's fused ops, as the ops they fuse (their definition in kernels/ops.h). The fp32
// intermediates the GPU keeps in registers live in scratch here.
thread_local std::vector<float> t_k, t_v, t_gate, t_up, t_rstd;
thread_local std::vector<uint16_t> t_in16;

// The op's bf16 input rows: in.x16, or rmsnorm_forward_w16's out16 of in.x.
const uint16_t* input_rows(const DecodeInput& in, int64_t R, int64_t IC) {
  if (!in.norm) return in.x16;
  if (R * IC > kDecodeNormedMaxElements)
    throw std::invalid_argument("decode op: R * IC = " + std::to_string(R * IC) +
                                " rows' elements to normalize, more than kDecodeNormedMaxElements");
  t_in16.resize(size_t(R * IC));
  t_rstd.resize(size_t(R));
  rmsnorm_forward_w16(nullptr, t_in16.data(), t_rstd.data(), in.x, in.norm, R, IC, in.eps);
  return t_in16.data();
}

void decode_qkv_w16(const DecodeQkv& a) {
  const int64_t qd = a.heads * a.d, kd = a.kv_heads * a.d;
  t_k.resize(size_t(a.R * kd));
  t_v.resize(size_t(a.R * kd));
  const uint16_t* x16 = input_rows(a.in, a.R, a.H);
  matmul_forward_a16w16(a.q, x16, a.wq, a.bq, a.R, a.H, qd);
  matmul_forward_a16w16(t_k.data(), x16, a.wk, a.bk, a.R, a.H, kd);
  matmul_forward_a16w16(t_v.data(), x16, a.wv, a.bv, a.R, a.H, kd);
  cpu_ops().rope_forward(a.q, a.pos, a.cos, a.sin, a.R, a.heads, a.d);
  cpu_ops().rope_forward(t_k.data(), a.pos, a.cos, a.sin, a.R, a.kv_heads, a.d);
  kv_store_w16(a.kcache, a.vcache, t_k.data(), t_v.data(), a.slot, a.pos, a.R, kd, a.slot_stride);
}

void gate_up_swiglu_w16(uint16_t* out16, const DecodeInput& in, const uint16_t* wg, const float* bg,
                        const uint16_t* wu, const float* bu, int64_t R, int64_t IC, int64_t I, bool round_gate_up) {
  t_gate.resize(size_t(R * I));
  t_up.resize(size_t(R * I));
  const uint16_t* x16 = input_rows(in, R, IC);
  matmul_forward_a16w16(t_gate.data(), x16, wg, bg, R, IC, I);
  matmul_forward_a16w16(t_up.data(), x16, wu, bu, R, IC, I);
  if (round_gate_up) {
    for (float& g : t_gate) g = round_to_bf16(g);
    for (float& u : t_up) u = round_to_bf16(u);
  }
  swiglu_forward_w16(t_gate.data(), out16, t_gate.data(), t_up.data(), R * I);
}

void rope_kv_store_w16(float* q, const float* qkv, const int32_t* pos, const float* cos, const float* sin,
                       const int32_t* slot, uint16_t* kcache, uint16_t* vcache, int64_t R, int64_t heads,
                       int64_t kv_heads, int64_t d, int64_t slot_stride) {
  const int64_t qd = heads * d, kd = kv_heads * d;
  t_k.resize(size_t(R * kd));
  t_v.resize(size_t(R * kd));
  split_rows<float>(qkv, R, qd + 2 * kd, {{q, 0, qd}, {t_k.data(), qd, kd}, {t_v.data(), qd + kd, kd}});
  cpu_ops().rope_forward(q, pos, cos, sin, R, heads, d);
  cpu_ops().rope_forward(t_k.data(), pos, cos, sin, R, kv_heads, d);
  kv_store_w16(kcache, vcache, t_k.data(), t_v.data(), slot, pos, R, kd, slot_stride);
}

// Rows [gate | up] of bf16 values into t_gate and t_up, compact and widened to fp32 (exact).
void split_gate_up(const uint16_t* gate_up16, int64_t R, int64_t I) {
  static thread_local std::vector<float> rows;
  widened(rows, gate_up16, 2 * R * I);
  t_gate.resize(size_t(R * I));
  t_up.resize(size_t(R * I));
  split_rows<float>(rows.data(), R, 2 * I, {{t_gate.data(), 0, I}, {t_up.data(), I, I}});
}

// The parts gathered into scratch, the unfused op over all rows at once, and its two outputs
// placed back as rows.
void swiglu_rows_backward_w16(uint16_t* dgate_up16, const uint16_t* dout16, const uint16_t* gate_up16, int64_t R,
                              int64_t I) {
  split_gate_up(gate_up16, R, I);
  static thread_local std::vector<float> dout;
  widened(dout, dout16, R * I);
  t_rows16.resize(size_t(2 * R * I));
  uint16_t *dg = t_rows16.data(), *du = dg + R * I;
  swiglu_backward_w16(dg, du, dout.data(), t_gate.data(), t_up.data(), R * I);
  join_rows<uint16_t>(dgate_up16, R, 2 * I, {{dg, 0, I}, {du, I, I}});
}

// The two parts gathered into scratch, then the unfused op over all rows at once: its values.
void swiglu_rows_w16(uint16_t* out16, const uint16_t* gate_up16, int64_t R, int64_t I) {
  split_gate_up(gate_up16, R, I);
  swiglu_forward_w16(nullptr, out16, t_gate.data(), t_up.data(), R * I);
}

// The product and then add(out, residual, out): the unfused path's residual_rmsnorm_forward_w16
// adds x + delta, the same one fp32 addition.
void decode_linear_w16(float* out, const DecodeInput& in, const uint16_t* w16, const float* bias,
                       const float* residual, int64_t R, int64_t IC, int64_t OC) {
  matmul_forward_a16w16(out, input_rows(in, R, IC), w16, bias, R, IC, OC);
  if (residual) cpu_ops().add(out, residual, out, R * OC);
}

Ops make_table() {
  Ops t = cpu_ops();
  t.name = "cpu+bf16";
  t.matmul_forward = matmul_forward;
  t.matmul_backward = matmul_backward;
  t.to_bf16 = to_bf16;
  t.matmul_forward_w16 = matmul_forward_w16;
  t.matmul_backward_w16 = matmul_backward_w16;
  t.attention_forward = attention_forward;
  t.attention_backward = attention_backward;
  t.kv_store_w16 = kv_store_w16;
  t.attention_decode_w16 = attention_decode_w16;
  t.rmsnorm_forward_w16 = rmsnorm_forward_w16;
  t.matmul_forward_a16w16 = matmul_forward_a16w16;
  t.matmul_backward_a16w16 = matmul_backward_a16w16;
  t.matmul_forward_o16 = matmul_forward_o16;
  t.residual_rmsnorm_forward_w16 = residual_rmsnorm_forward_w16;
  t.swiglu_forward_w16 = swiglu_forward_w16;
  t.decode_qkv_w16 = decode_qkv_w16;
  t.gate_up_swiglu_w16 = gate_up_swiglu_w16;
  t.rope_kv_store_w16 = rope_kv_store_w16;
  t.swiglu_rows_w16 = swiglu_rows_w16;
  t.decode_linear_w16 = decode_linear_w16;
  t.swiglu_backward_w16 = swiglu_backward_w16;
  t.matmul_backward_g16 = matmul_backward_g16;
  t.matmul_backward_g16_dinp16 = matmul_backward_g16_dinp16;
  t.adamw_w16 = adamw_w16;
  t.rmsnorm_backward_w16 = rmsnorm_backward_w16;
  t.token_stats_backward_w16 = token_stats_backward_w16;
  t.rope_round_qkv_w16 = rope_round_qkv_w16;
  t.attention_forward_w16 = attention_forward_w16;
  t.attention_backward_w16 = attention_backward_w16;
  t.rope_backward_round_w16 = rope_backward_round_w16;
  t.swiglu_rows_backward_w16 = swiglu_rows_backward_w16;
  return t;
}

}  // namespace

const Ops& cpu_bf16_matmul_ops() {
  static const Ops table = make_table();
  return table;
}

}  // namespace azr::kernels
