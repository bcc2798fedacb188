#pragma once
// What Ops::decode_layers_w16 computes, as the ops it is defined by (kernels/ops.h): the model's
// decode step where the table has no such op (kernels/cpu), the CUDA table's own where its
// persistent kernel is not chosen or does not apply (kernels/cuda/decode_layers.cu), and the
// reference of the tests that compare the two. C++17, so that nvcc compiles it too; the two
// helpers below are device code as well there, where the persistent kernel (decode_layers.cuh)
// finds each layer's tensors with them.
#include <cstdint>

#include "kernels/ops.h"

#ifdef __CUDACC__
#define AZR_HOST_DEVICE __host__ __device__
#else
#define AZR_HOST_DEVICE
#endif

namespace azr::kernels {

// Layer l's tensor from layer 0's (null stays null).
template <class T>
AZR_HOST_DEVICE T* decode_layer_at(T* p, int64_t l, int64_t stride) {
  return p ? p + l * stride : p;
}

// Layer l's decode_qkv_w16 arguments.
AZR_HOST_DEVICE inline DecodeQkv decode_layer_qkv(const DecodeLayers& a, int64_t l) {
  const int64_t ps = a.param_stride;
  DecodeQkv q;
  q.in.x = a.x, q.in.norm = decode_layer_at(a.ln1, l, ps), q.in.eps = a.eps;
  q.wq = decode_layer_at(a.wq, l, ps), q.wk = decode_layer_at(a.wk, l, ps), q.wv = decode_layer_at(a.wv, l, ps);
  q.bq = decode_layer_at(a.bq, l, ps), q.bk = decode_layer_at(a.bk, l, ps), q.bv = decode_layer_at(a.bv, l, ps);
  q.cos = a.cos, q.sin = a.sin, q.slot = a.slot, q.pos = a.pos, q.q = a.q;
  q.kcache = decode_layer_at(a.kcache, l, a.cache_stride), q.vcache = decode_layer_at(a.vcache, l, a.cache_stride);
  q.R = 1, q.H = a.H, q.heads = a.heads, q.kv_heads = a.kv_heads, q.d = a.d, q.slot_stride = a.slot_stride;
  return q;
}

// decode_layers_w16's five ops a layer, on `ops`; o_projection(l, out, in, w16, bias, residual, R,
// IC, OC) computes layer l's o projection as ops.decode_linear_w16 does, where a backend wants
// more of that launch (kernels/cuda/decode_layers.cu: gate's and up's weights asked of L2 ahead).
template <class OProjection>
void decode_layers_as_ops(const Ops& ops, const DecodeLayers& a, OProjection&& o_projection) {
  const int64_t ps = a.param_stride, qd = a.heads * a.d;
  const AttentionShape shape{0, 0, a.heads, a.kv_heads, a.d, a.slot_stride, nullptr};
  for (int64_t l = 0; l < a.layers; l++) {
    const DecodeQkv qkv = decode_layer_qkv(a, l);
    ops.decode_qkv_w16(qkv);
    ops.attention_decode_w16(a.att, a.att16, a.q, qkv.kcache, qkv.vcache, a.slot, a.pos, 1, shape);
    DecodeInput att;
    att.x16 = a.att16;
    o_projection(l, a.h, att, decode_layer_at(a.wo, l, ps), decode_layer_at(a.bo, l, ps), a.x, int64_t(1), qd, a.H);
    DecodeInput normed_h;
    normed_h.x = a.h, normed_h.norm = decode_layer_at(a.ln2, l, ps), normed_h.eps = a.eps;
    ops.gate_up_swiglu_w16(a.mlp16, normed_h, decode_layer_at(a.wg, l, ps), decode_layer_at(a.bg, l, ps),
                           decode_layer_at(a.wu, l, ps), decode_layer_at(a.bu, l, ps), 1, a.H, a.I, a.round_gate_up);
    DecodeInput mlp;
    mlp.x16 = a.mlp16;
    ops.decode_linear_w16(a.x, mlp, decode_layer_at(a.wd, l, ps), decode_layer_at(a.bd, l, ps), a.h, 1, a.I, a.H);
  }
}

// decode_layers_w16's five ops a layer, on `ops`.
inline void decode_layers_as_ops(const Ops& ops, const DecodeLayers& a) {
  decode_layers_as_ops(ops, a,
                       [&ops](int64_t, float* out, const DecodeInput& in, const uint16_t* w16, const float* bias,
                              const float* residual, int64_t R, int64_t IC, int64_t OC) {
                         ops.decode_linear_w16(out, in, w16, bias, residual, R, IC, OC);
                       });
}

}  // namespace azr::kernels
