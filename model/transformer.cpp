// Forward and backward of the decoder, written out op by op (see transformer.h for the math).
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/decode_layers.h"
#include "model/safetensors.h"

namespace azr::model {

namespace {

// "" if every value of the tensor is finite; else "tensor NAME holds NaN (element I)".
std::string not_finite_in(const std::string& name, std::span<const float> values) {
  const auto bad = std::find_if_not(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
  if (bad == values.end()) return "";
  return "tensor " + name + " holds " + (std::isnan(*bad) ? "NaN" : *bad > 0 ? "inf" : "-inf") + " (element " +
         std::to_string(bad - values.begin()) + ")";
}

// splitmix64 + Box-Muller: a normal stream that is the same on every platform and compiler
// (std::normal_distribution is not), so a seed names one model everywhere.
struct NormalStream {
  static constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  uint64_t state;
  bool has_spare = false;
  double spare = 0;
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  static double to_uniform(uint64_t bits) { return double((bits >> 11) + 1) * 0x1.0p-53; }  // (0, 1]
  uint64_t next_u64() { return mix(state += kGamma); }
  double uniform() { return to_uniform(next_u64()); }
  double normal() {
    if (has_spare) {
      has_spare = false;
      return spare;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform())), a = 2.0 * M_PI * uniform();
    spare = r * std::sin(a);
    has_spare = true;
    return r * std::cos(a);
  }
  // out[i] = float(normal() * scale) for i < n: the same values as n calls, the whole pairs
  // computed in parallel (the k-th number after `state` is mix(state + k kGamma): the stream is
  // indexable). A 1.5B model's 1.5e9 normals took about 34 s on one thread, before every
  // benchmark on a GPU machine lent by the minute.
  void fill(float* out, size_t n, double scale) {
    size_t i = 0;
    if (has_spare && n > 0) out[i++] = float(normal() * scale);
    const size_t pairs = (n - i) / 2;
    const uint64_t base = state;
#pragma omp parallel for schedule(static) if (pairs >= (size_t(1) << 16))
    for (size_t k = 0; k < pairs; k++) {
      const double u1 = to_uniform(mix(base + (2 * k + 1) * kGamma)), u2 = to_uniform(mix(base + (2 * k + 2) * kGamma));
      const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
      out[i + 2 * k] = float(r * std::cos(a) * scale);
      out[i + 2 * k + 1] = float(r * std::sin(a) * scale);
    }
    state = base + 2 * pairs * kGamma;
    for (i += 2 * pairs; i < n; i++) out[i] = float(normal() * scale);
  }
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// RoPE inverse frequencies in fp32, as transformers computes them (theta ** (2i/d) in float),
// with Llama 3's frequency-dependent scaling when the config asks for it.
std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; i++)
    inv[i] = 1.f / std::pow(float(c.rope_theta), float(2 * i) / float(c.head_dim));
  if (c.rope_scaling) {
    const RopeScaling& s = *c.rope_scaling;
    const double old_len = double(s.original_max_position_embeddings);
    const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
    for (float& f : inv) {
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen < high_wavelen) continue;  // high frequency: unchanged
      if (wavelen > low_wavelen) {
        f = float(f / s.factor);
      } else {
        const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = float((1.0 - smooth) * f / s.factor + smooth * f);
      }
    }
  }
  return inv;
}

}  // namespace

SequenceBatch SequenceBatch::from(const std::vector<std::vector<int32_t>>& seqs, int32_t pad_id) {
  if (seqs.empty()) throw std::invalid_argument("a batch needs at least one sequence");
  SequenceBatch b;
  b.B = int64_t(seqs.size());
  for (const auto& s : seqs) {
    if (s.empty()) throw std::invalid_argument("a sequence in the batch is empty");
    b.T = std::max(b.T, int64_t(s.size()));
  }
  b.ids.assign(size_t(b.B * b.T), pad_id);
  for (int64_t i = 0; i < b.B; i++) {
    std::copy(seqs[i].begin(), seqs[i].end(), b.ids.begin() + i * b.T);
    b.lengths.push_back(int32_t(seqs[i].size()));
  }
  return b;
}

KVCache::KVCache(const ModelConfig& c, int64_t slots_, int64_t capacity_, const kernels::Ops& ops)
    : layers(c.num_hidden_layers),
      slots(slots_),
      capacity(capacity_),
      row(c.num_key_value_heads * c.head_dim),
      bf16(ops.kv_store_w16 != nullptr),
      k(ops, bf16 ? 0 : size_t(layers * slots * capacity * row)),
      v(ops, bf16 ? 0 : size_t(layers * slots * capacity * row)),
      k16(ops, bf16 ? size_t(layers * slots * capacity * row) : 0),
      v16(ops, bf16 ? size_t(layers * slots * capacity * row) : 0) {}

void KVCache::copy_positions(int64_t from, int64_t to, int64_t n) {
  if (from < 0 || from >= slots || to < 0 || to >= slots || n < 0 || n > capacity)
    throw std::invalid_argument("KVCache::copy_positions: slot or length outside the cache");
  if (from == to || n == 0) return;
  // [layer][slot][position][row]: one contiguous run of n rows per layer, keys and values.
  const auto copy_runs = [&](auto& kb, auto& vb) {
    const kernels::Ops& ops = kb.ops();
    const size_t bytes = size_t(n * row) * sizeof(*kb.data());
    for (int64_t l = 0; l < layers; l++) {
      const int64_t src = (l * slots + from) * slot_stride(), dst = (l * slots + to) * slot_stride();
      ops.copy(kb.data() + dst, kb.data() + src, bytes);
      ops.copy(vb.data() + dst, vb.data() + src, bytes);
    }
  };
  if (bf16) copy_runs(k16, v16);
  else copy_runs(k, v);
}

// Pointers to one layer's weights (or their gradients) in the flat buffer; null for absent biases.
struct Transformer::LayerWeights {
  float *ln1, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *ln2, *wg, *bg, *wu, *bu, *wd, *bd;
};

Transformer::Transformer(ModelConfig c, const kernels::Ops& ops)
    : config_(std::move(c)),
      ops_(&ops),
      params_(ops),
      grads_(ops),
      params16_(ops),
      gemm_in16_(ops),
      rope_cos_(ops),
      rope_sin_(ops),
      acts_(ops),
      bwd_(ops),
      positions_(ops),
      ids_(ops),
      lengths_(ops),
      step_idx_(ops),
      head_rows_dev_(ops),
      head_targets_dev_(ops),
      head_lse_(ops),
      head_logp_(ops),
      head_entropy_(ops),
      head_logits_(ops),
      head_scratch_(ops),
      head_state_(ops),
      head_dlogits16_(ops),
      prefill_logits_(ops),
      decode_graphs_(ops) {
  build_layout();
}

// Where each tensor lives in the flat buffers (parameters, gradients, the optimizer's moments and
// the bf16 copy): in expected_tensors()' order, except within a layer, where the weights of q, k
// and v come first and then their biases, and likewise for gate and up. So [Wq; Wk; Wv] and
// [Wg; Wu] are each one row-major matrix (and their biases one vector), which a decode step of
// many rows multiplies in one GEMM (decode_qkv, decode_gate_up). tensors() keeps expected_tensors()'
// order; file_order() maps the buffers to it for the optimizer state's file.
void Transformer::build_layout() {
  static constexpr const char* kLayerStorage[] = {
      "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
      "self_attn.q_proj.bias",  "self_attn.k_proj.bias",   "self_attn.v_proj.bias",   "self_attn.o_proj.weight",
      "self_attn.o_proj.bias",  "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
      "mlp.gate_proj.bias",     "mlp.up_proj.bias",        "mlp.down_proj.weight",    "mlp.down_proj.bias"};
  for (const TensorSpec& t : expected_tensors(config_)) {
    if (t.optional) continue;  // a tied head is the embedding
    size_t n = 1;
    for (int64_t d : t.shape) n *= size_t(d);
    tensors_.push_back({t.name, t.shape, 0, n});
  }
  // A layer's tensors are consecutive in expected_tensors(); each run of one layer's is stored in
  // kLayerStorage's order, everything else where it stands.
  const auto layer_prefix = [](const std::string& name) -> std::string {
    static const std::string kLayers = "model.layers.";
    if (!name.starts_with(kLayers)) return "";
    return name.substr(0, name.find('.', kLayers.size()) + 1);
  };
  const auto storage_rank = [](std::string_view suffix) {
    return size_t(std::find(std::begin(kLayerStorage), std::end(kLayerStorage), suffix) - std::begin(kLayerStorage));
  };
  size_t off = 0;
  for (size_t i = 0; i < tensors_.size();) {
    const std::string prefix = layer_prefix(tensors_[i].name);
    size_t end = i + 1;
    if (!prefix.empty())
      while (end < tensors_.size() && tensors_[end].name.starts_with(prefix)) end++;
    std::vector<size_t> run(end - i);
    for (size_t k = 0; k < run.size(); k++) run[k] = i + k;
    std::stable_sort(run.begin(), run.end(), [&](size_t a, size_t b) {
      return storage_rank(std::string_view(tensors_[a].name).substr(prefix.size())) <
             storage_rank(std::string_view(tensors_[b].name).substr(prefix.size()));
    });
    for (size_t t : run) tensors_[t].offset = off, off += tensors_[t].numel;
    i = end;
  }
  params_.assign_zero(off);
  embed_off_ = find_tensor("model.embed_tokens.weight")->offset;
  norm_off_ = find_tensor("model.norm.weight")->offset;
  head_off_ = config_.tie_word_embeddings ? embed_off_ : find_tensor("lm_head.weight")->offset;
  // The slots of LayerWeights, in its member order.
  static constexpr const char* kSlots[16] = {
      "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.q_proj.bias",  "self_attn.k_proj.weight",
      "self_attn.k_proj.bias",   "self_attn.v_proj.weight", "self_attn.v_proj.bias",  "self_attn.o_proj.weight",
      "self_attn.o_proj.bias",   "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.gate_proj.bias",
      "mlp.up_proj.weight",      "mlp.up_proj.bias",        "mlp.down_proj.weight",   "mlp.down_proj.bias"};
  layer_offsets_.resize(size_t(config_.num_hidden_layers));
  for (int64_t l = 0; l < config_.num_hidden_layers; l++) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    for (int i = 0; i < 16; i++) {
      const ParamTensor* t = find_tensor(prefix + kSlots[i]);
      layer_offsets_[size_t(l)][size_t(i)] = t ? t->offset : kNoTensor;
    }
  }
  // Every layer holds the same tensors in the same order, so each is layer 0's a fixed stride on
  // (kernels::DecodeLayers relies on it).
  layer_stride_ = config_.num_hidden_layers > 1 ? layer_offsets_[1][0] - layer_offsets_[0][0] : 0;
  for (size_t l = 0; l < layer_offsets_.size(); l++)
    for (size_t i = 0; i < 16; i++) {
      const size_t first = layer_offsets_[0][i];
      const size_t want = first == kNoTensor ? kNoTensor : first + l * layer_stride_;
      if (layer_offsets_[l][i] != want) throw std::logic_error("build_layout: layers at uneven strides");
    }
}

std::vector<FlatRange> Transformer::file_order() const {
  std::vector<FlatRange> out;
  size_t file = 0;
  for (const ParamTensor& t : tensors_) out.push_back({file, t.offset, t.numel}), file += t.numel;
  return out;
}

const ParamTensor* Transformer::find_tensor(std::string_view name) const {
  for (const ParamTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

float* Transformer::grads_storage() {
  if (grads_.size() != params_.size()) grads_.assign_zero(params_.size());
  return grads_.data();
}

std::span<float> Transformer::gradients() {
  grads_storage();
  fill_unset_weight_grads();
  return grads_.span();
}

std::span<float> Transformer::param(std::string_view name) {
  weights16_stale_ = true;  // write access, as parameters()
  const ParamTensor* t = find_tensor(name);
  if (!t) throw std::out_of_range("no parameter named '" + std::string(name) + "'");
  return params_.span().subspan(t->offset, t->numel);
}

std::span<float> Transformer::grad(std::string_view name) {
  const ParamTensor* t = find_tensor(name);
  if (!t) throw std::out_of_range("no parameter named '" + std::string(name) + "'");
  return gradients().subspan(t->offset, t->numel);
}

std::vector<std::pair<size_t, size_t>> Transformer::product_written_grads() const {
  // Each layer's projection matrices (q, k, v, o, gate, up, down) and the LM head (the embedding
  // when tied), as build_layout placed them.
  std::vector<std::pair<size_t, size_t>> all;
  for (const ParamTensor& t : tensors_)
    if (t.name.ends_with("_proj.weight") || t.offset == head_off_) all.emplace_back(t.offset, t.offset + t.numel);
  std::sort(all.begin(), all.end());
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& [begin, end] : all) {
    if (!ranges.empty() && ranges.back().second == begin)
      ranges.back().second = end;
    else
      ranges.emplace_back(begin, end);
  }
  return ranges;
}

void Transformer::fill_unset_weight_grads() {
  if (!weight_grads_unset_) return;
  for (const auto& [begin, end] : product_written_grads())
    ops_->fill_zero(grads_.data() + begin, int64_t(end - begin));
  weight_grads_unset_ = false;
}

void Transformer::zero_grad() {
  float* g = grads_storage();
  if (!defers_zero_grad()) {
    ops_->fill_zero(g, int64_t(grads_.size()));
    weight_grads_unset_ = false;
    return;
  }
  size_t at = 0;  // the gaps between the products' ranges, and the tail
  for (const auto& [begin, end] : product_written_grads()) {
    if (begin > at) ops_->fill_zero(g + at, int64_t(begin - at));
    at = end;
  }
  if (at < grads_.size()) ops_->fill_zero(g + at, int64_t(grads_.size() - at));
  weight_grads_unset_ = true;
}

void Transformer::set_deferred_zero_grad(bool on) {
  if (!on) fill_unset_weight_grads();
  deferred_zero_grad_ = on;
}

uint16_t* Transformer::weights16_for_writing() {
  if (!ops_->to_bf16) return nullptr;
  if (params16_.size() != params_.size()) params16_.assign_zero(params_.size());
  weights16_stale_ = false;
  return params16_.data();
}

const uint16_t* Transformer::weights16(const float* w) {
  if (weights16_stale_) {
    if (params16_.size() != params_.size()) params16_.assign_zero(params_.size());
    ops_->to_bf16(params16_.data(), params_.data(), int64_t(params_.size()));
    weights16_stale_ = false;
  }
  return params16_.data() + (w - params_.data());
}

void Transformer::gemm_forward(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IC,
                               int64_t OC) {
  if (ops_->matmul_forward_w16)
    ops_->matmul_forward_w16(out, inp, weights16(w), bias, N, IC, OC);
  else
    ops_->matmul_forward(out, inp, w, bias, N, IC, OC);
}

void Transformer::gemm_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                                const float* w, int64_t N, int64_t IC, int64_t OC) {
  if (ops_->matmul_backward_w16)
    ops_->matmul_backward_w16(dinp, dw, dbias, dout, inp, weights16(w), N, IC, OC);
  else
    ops_->matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC);
}

bool Transformer::bf16_training() const {
  const kernels::Ops& o = *ops_;
  return o.rmsnorm_forward_w16 && o.residual_rmsnorm_forward_w16 && o.swiglu_forward_w16 && o.swiglu_backward_w16 &&
         o.matmul_backward_g16 && o.rmsnorm_backward_w16 && bf16_training_buffers(config_);
}

bool Transformer::attention16() const {
  const kernels::Ops& o = *ops_;
  const ModelConfig& c = config_;
  // The q/k/v GEMM's fp32 rows borrow the gate and up slots: 2 I floats a row.
  const int64_t qkv_width = (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim;
  return joined_products_ && bf16_training() && o.rope_round_qkv_w16 && o.attention_forward_w16 &&
         o.attention_backward_w16 && o.rope_backward_round_w16 && qkv_width <= 2 * c.intermediate_size;
}

bool Transformer::mlp_rows16() const {
  const kernels::Ops& o = *ops_;
  return joined_products_ && bf16_training() && o.matmul_forward_o16 && o.swiglu_rows_w16 &&
         o.swiglu_rows_backward_w16 && o.matmul_backward_g16_dinp16 && !config_.mlp_bias;
}

bool Transformer::gate_up_rounded(const LayerWeights& w) const { return mlp_rows16() && gate_up_one_matrix(w); }

bool Transformer::qkv_one_matrix(const LayerWeights& w) const {
  const int64_t H = config_.hidden_size, qd = config_.num_attention_heads * config_.head_dim;
  const int64_t kd = config_.num_key_value_heads * config_.head_dim;
  const bool biases_adjacent = w.bq ? (w.bk == w.bq + qd && w.bv == w.bk + kd) : (!w.bk && !w.bv);
  return w.wk == w.wq + qd * H && w.wv == w.wk + kd * H && biases_adjacent;
}

bool Transformer::gate_up_one_matrix(const LayerWeights& w) const {
  const int64_t H = config_.hidden_size, I = config_.intermediate_size;
  const bool biases_adjacent = w.bg ? w.bu == w.bg + I : !w.bu;
  return w.wu == w.wg + I * H && biases_adjacent;
}

Transformer::GemmInput Transformer::norm_for_gemms(float* out, float* rstd, const float* x, const float* w,
                                                  int64_t N, uint16_t* keep16) {
  const int64_t H = config_.hidden_size;
  const float eps = float(config_.rms_norm_eps);
  if (!ops_->rmsnorm_forward_w16) {
    ops_->rmsnorm_forward(out, rstd, x, w, N, H, eps);
    return {out, nullptr};
  }
  if (keep16) {
    ops_->rmsnorm_forward_w16(nullptr, keep16, rstd, x, w, N, H, eps);
    return {nullptr, keep16};
  }
  gemm_in16_.ensure(size_t(N * H));
  ops_->rmsnorm_forward_w16(out, gemm_in16_.data(), rstd, x, w, N, H, eps);
  return {out, gemm_in16_.data()};
}

Transformer::GemmInput Transformer::residual_norm_for_gemms(float* res_out, float* out, float* rstd, const float* x,
                                                           const float* delta, const float* w, int64_t N,
                                                           uint16_t* keep16) {
  const int64_t H = config_.hidden_size;
  if (!ops_->residual_rmsnorm_forward_w16) {
    ops_->add(res_out, x, delta, N * H);
    return norm_for_gemms(out, rstd, res_out, w, N, keep16);
  }
  uint16_t* out16 = keep16;
  if (!out16) {
    gemm_in16_.ensure(size_t(N * H));
    out16 = gemm_in16_.data();
  }
  ops_->residual_rmsnorm_forward_w16(res_out, keep16 ? nullptr : out, out16, rstd, x, delta, w, N, H,
                                     float(config_.rms_norm_eps));
  return {keep16 ? nullptr : out, out16};
}

Transformer::GemmInput Transformer::swiglu_for_gemm(float* out, const float* gate, const float* up, int64_t n) {
  if (!ops_->swiglu_forward_w16) {
    ops_->swiglu_forward(out, gate, up, n);
    return {out, nullptr};
  }
  // The GEMM after it reads the bf16 result only: the fp32 one (an N x I write, a third of the op's
  // traffic) is not written.
  gemm_in16_.ensure(size_t(n));
  ops_->swiglu_forward_w16(nullptr, gemm_in16_.data(), gate, up, n);
  return {nullptr, gemm_in16_.data()};
}

Transformer::GemmInput Transformer::rounded_for_gemms(const float* x, int64_t n) {
  if (!ops_->matmul_backward_a16w16) return {x, nullptr};
  gemm_in16_.ensure(size_t(n));
  ops_->to_bf16(gemm_in16_.data(), x, n);
  return {x, gemm_in16_.data()};
}

void Transformer::gemm_forward(float* out, GemmInput in, const float* w, const float* bias, int64_t N, int64_t IC,
                               int64_t OC) {
  if (in.x16)
    ops_->matmul_forward_a16w16(out, in.x16, weights16(w), bias, N, IC, OC);
  else
    gemm_forward(out, in.x, w, bias, N, IC, OC);
}

void Transformer::gemm_backward(float* dinp, float* dw, float* dbias, const float* dout, GemmInput in,
                                const float* w, int64_t N, int64_t IC, int64_t OC) {
  if (in.x16)
    ops_->matmul_backward_a16w16(dinp, dw, dbias, dout, in.x16, weights16(w), N, IC, OC);
  else
    gemm_backward(dinp, dw, dbias, dout, in.x, w, N, IC, OC);
}

void Transformer::store_kv(KVCache& cache, int64_t l, const float* k, const float* v, const int32_t* slot,
                           const int32_t* pos, int64_t R) {
  if (cache.bf16)
    ops_->kv_store_w16(cache.k16_at(l), cache.v16_at(l), k, v, slot, pos, R, cache.row, cache.slot_stride());
  else
    ops_->kv_store(cache.k_at(l), cache.v_at(l), k, v, slot, pos, R, cache.row, cache.slot_stride());
}

Transformer::GemmInput Transformer::attend_cache(float* out, const float* q, KVCache& cache, int64_t l,
                                                const int32_t* slot, const int32_t* pos, int64_t R) {
  const ModelConfig& c = config_;
  const kernels::AttentionShape shape{0, 0, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                                      cache.slot_stride(), nullptr};
  if (!cache.bf16) {
    ops_->attention_decode(out, q, cache.k_at(l), cache.v_at(l), slot, pos, R, shape);
    return {out, nullptr};
  }
  const int64_t n = R * c.num_attention_heads * c.head_dim;
  gemm_in16_.ensure(size_t(n));
  ops_->attention_decode_w16(out, gemm_in16_.data(), q, cache.k16_at(l), cache.v16_at(l), slot, pos, R, shape);
  return {out, gemm_in16_.data()};
}

void Transformer::decode_qkv(float* q, float* scratch, GemmInput ln1, const LayerWeights& w, KVCache& cache,
                             int64_t l, const int32_t* slot, const int32_t* pos, int64_t R) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  const int64_t qd = nh * d, kd = nkv * d;
  if (ops_->decode_qkv_w16 && ln1.x16 && cache.bf16 && kernels::decode_few_rows_pay(R, H, qd + 2 * kd)) {
    ops_->decode_qkv_w16(decode_qkv_args({.x16 = ln1.x16}, q, w, cache, l, slot, pos, R));
    return;
  }
  // [Wq; Wk; Wv] is one matrix (build_layout; the biases one vector where there are biases): one
  // GEMM, then RoPE and the cache store in one op.
  if (ops_->rope_kv_store_w16 && cache.bf16 && qkv_one_matrix(w)) {
    gemm_forward(scratch, ln1, w.wq, w.bq, R, H, qd + 2 * kd);
    ops_->rope_kv_store_w16(q, scratch, pos, rope_cos_.data(), rope_sin_.data(), slot, cache.k16_at(l),
                            cache.v16_at(l), R, nh, nkv, d, cache.slot_stride());
    return;
  }
  float *k = scratch, *v = scratch + R * kd;
  gemm_forward(q, ln1, w.wq, w.bq, R, H, qd);
  gemm_forward(k, ln1, w.wk, w.bk, R, H, kd);
  gemm_forward(v, ln1, w.wv, w.bv, R, H, kd);
  ops_->rope_forward(q, pos, rope_cos_.data(), rope_sin_.data(), R, nh, d);
  ops_->rope_forward(k, pos, rope_cos_.data(), rope_sin_.data(), R, nkv, d);
  store_kv(cache, l, k, v, slot, pos, R);
}

kernels::DecodeQkv Transformer::decode_qkv_args(const kernels::DecodeInput& in, float* q, const LayerWeights& w,
                                                KVCache& cache, int64_t l, const int32_t* slot, const int32_t* pos,
                                                int64_t R) {
  const ModelConfig& c = config_;
  return {.in = in, .wq = weights16(w.wq), .wk = weights16(w.wk), .wv = weights16(w.wv), .bq = w.bq, .bk = w.bk,
          .bv = w.bv, .cos = rope_cos_.data(), .sin = rope_sin_.data(), .slot = slot, .pos = pos, .q = q,
          .kcache = cache.k16_at(l), .vcache = cache.v16_at(l), .R = R, .H = c.hidden_size,
          .heads = c.num_attention_heads, .kv_heads = c.num_key_value_heads, .d = c.head_dim,
          .slot_stride = cache.slot_stride()};
}

bool Transformer::decode_norms_fold(const KVCache& cache, int64_t R) const {
  const kernels::Ops& o = *ops_;
  return o.decode_linear_w16 && o.decode_qkv_w16 && o.gate_up_swiglu_w16 && o.matmul_forward_a16w16 &&
         o.rmsnorm_forward_w16 && cache.bf16 &&
         R <= kernels::kDecodeNormFoldMaxRows && R * config_.hidden_size <= kernels::kDecodeNormedMaxElements;
}

void Transformer::decode_layers_folded(float* x, float* h, float* q, float* att, float* gate, float* rstd,
                                       float* logits, KVCache& cache, const int32_t* slot, const int32_t* pos,
                                       int64_t R) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  if (R != 1) throw std::logic_error("decode_layers_folded: one row (kernels::kDecodeNormFoldMaxRows)");
  // The layers as one op (kernels/decode_layers.h: five a layer where the table has no op of its
  // own), over the flat buffers' layout: every layer's tensors layer 0's plus a fixed stride.
  const LayerWeights w = layer_weights(0, false);
  kernels::DecodeLayers a;
  a.x = x, a.ln1 = w.ln1, a.ln2 = w.ln2;
  a.wq = weights16(w.wq), a.wk = weights16(w.wk), a.wv = weights16(w.wv), a.wo = weights16(w.wo);
  a.wg = weights16(w.wg), a.wu = weights16(w.wu), a.wd = weights16(w.wd);
  a.bq = w.bq, a.bk = w.bk, a.bv = w.bv, a.bo = w.bo, a.bg = w.bg, a.bu = w.bu, a.bd = w.bd;
  a.cos = rope_cos_.data(), a.sin = rope_sin_.data(), a.slot = slot, a.pos = pos;
  a.kcache = cache.k16_at(0), a.vcache = cache.v16_at(0);
  a.q = q, a.att = att, a.h = h;
  // att16 and, after the layers, the final norm's bf16 row: one size, so no call reallocates it.
  gemm_in16_.ensure(size_t(std::max(c.num_attention_heads * c.head_dim, H)));
  a.att16 = gemm_in16_.data();
  a.mlp16 = reinterpret_cast<uint16_t*>(gate);  // gate's I floats hold the I bf16 values
  a.H = H, a.heads = c.num_attention_heads, a.kv_heads = c.num_key_value_heads, a.d = c.head_dim;
  a.I = c.intermediate_size, a.slot_stride = cache.slot_stride();
  a.layers = c.num_hidden_layers, a.param_stride = int64_t(layer_stride_);
  a.cache_stride = c.num_hidden_layers > 1 ? cache.k16_at(1) - cache.k16_at(0) : 0;
  a.eps = float(c.rms_norm_eps), a.round_gate_up = gate_up_rounded(w);
  if (ops_->decode_layers_w16)
    ops_->decode_layers_w16(a);
  else
    kernels::decode_layers_as_ops(*ops_, a);
  // The final norm in a launch of its own: the LM head's product is about 19,000 blocks at batch 1
  // (one per 8 of 151,936 rows), and every block normalizing the rows again would read 114 MB
  // from L2 beside its 467 MB of weights, more than one launch costs.
  gemm_in16_.ensure(size_t(R * H));
  const GemmInput ln = norm_for_gemms(nullptr, rstd, x, params_.data() + norm_off_, R, gemm_in16_.data());
  ops_->decode_linear_w16(logits, {.x16 = ln.x16}, weights16(params_.data() + head_off_), nullptr, nullptr, R, H,
                          c.vocab_size);
}

Transformer::GemmInput Transformer::decode_gate_up(float* gate, GemmInput ln2, const LayerWeights& w, int64_t R) {
  const int64_t H = config_.hidden_size, I = config_.intermediate_size;
  float* up = gate + R * I;
  if (ops_->gate_up_swiglu_w16 && ln2.x16 && kernels::decode_few_rows_pay(R, H, 2 * I)) {
    // gate's R x I floats hold the R x I bf16 result: storage the unfused path would use anyway,
    // and ln2.x16 (gemm_in16_) is this op's input, so the output cannot go there.
    auto* out16 = reinterpret_cast<uint16_t*>(gate);
    ops_->gate_up_swiglu_w16(out16, {.x16 = ln2.x16}, weights16(w.wg), w.bg, weights16(w.wu), w.bu, R, H, I,
                             gate_up_rounded(w));
    return {nullptr, out16};
  }
  // As the training forward: [Wg; Wu] is one matrix (build_layout), one GEMM into bf16 rows of
  // [gate | up] (over gate's storage), then SwiGLU on them.
  if (ln2.x16 && gate_up_rounded(w)) {
    auto* gate_up16 = reinterpret_cast<uint16_t*>(gate);
    ops_->matmul_forward_o16(gate_up16, ln2.x16, weights16(w.wg), R, H, 2 * I);
    gemm_in16_.ensure(size_t(R * I));  // it held ln2, read by now
    ops_->swiglu_rows_w16(gemm_in16_.data(), gate_up16, R, I);
    return {nullptr, gemm_in16_.data()};
  }
  gemm_forward(gate, ln2, w.wg, w.bg, R, H, I);
  gemm_forward(up, ln2, w.wu, w.bu, R, H, I);
  return swiglu_for_gemm(gate, gate, up, R * I);
}

Transformer::LayerWeights Transformer::layer_weights(int64_t l, bool grads) {
  float* base = grads ? grads_storage() : params_.data();
  const std::array<size_t, 16>& off = layer_offsets_[size_t(l)];
  auto at = [&](int i) { return off[i] == kNoTensor ? nullptr : base + off[i]; };
  return {at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), at(9), at(10), at(11), at(12), at(13), at(14), at(15)};
}

Transformer Transformer::random(const ModelConfig& config, uint64_t seed, float init_std, const kernels::Ops& ops) {
  Transformer m(config, ops);
  NormalStream rng{seed};
  std::vector<float> host;  // one tensor at a time, then to the backend
  for (const ParamTensor& t : m.tensors_) {
    host.resize(t.numel);
    if (ends_with(t.name, "norm.weight")) {
      std::fill(host.begin(), host.end(), 1.f);
    } else if (ends_with(t.name, ".bias")) {
      std::fill(host.begin(), host.end(), 0.f);
    } else {
      rng.fill(host.data(), t.numel, init_std);
    }
    m.params_.upload(host.data(), t.numel, t.offset);
  }
  return m;
}

Transformer Transformer::from_pretrained(const std::filesystem::path& dir, const kernels::Ops& ops) {
  ModelConfig config = load_config((dir / "config.json").string());
  load_generation_config_if_present((dir / "generation_config.json").string(), config);
  Checkpoint ckpt = open_checkpoint(dir);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const std::string& name : ckpt.names()) shapes[name] = ckpt.at(name).shape;
  check_checkpoint(config, shapes, dir.string());
  // A tied config uses the embedding as the head even if a re-saved checkpoint also carries
  // lm_head.weight: transformers ties the weights after loading, so the copy is never used.
  Transformer m(std::move(config), ops);
  std::vector<float> host;  // one tensor at a time, then to the backend
  for (const ParamTensor& t : m.tensors_) {
    host.resize(t.numel);
    to_f32(ckpt.at(t.name), host);
    // A weight that is not a number (a diverged run's, a bad conversion) made every logit NaN:
    // generation gave token 0 at every step and an evaluation scored 0, without a word.
    if (const std::string bad = not_finite_in(t.name, host); !bad.empty())
      throw SafetensorsError(dir.string() + ": " + bad + "; these weights are not a usable model");
    m.params_.upload(host.data(), t.numel, t.offset);
  }
  return m;
}

Transformer Transformer::copy_to(const kernels::Ops& ops) const {
  Transformer m(config_, ops);
  m.recompute_ = recompute_;
  m.joined_products_ = joined_products_;
  std::vector<float> copy;
  const std::span<const float> host = kernels::host_view(*ops_, params_.span(), copy);
  m.params_.upload(host.data(), host.size());
  return m;
}

void Transformer::save_pretrained(const std::filesystem::path& dir) const {
  std::vector<float> copy;
  const float* host = kernels::host_view(*ops_, params_.span(), copy).data();  // the writer reads the host
  // Weights a diverged update left (azr train at algorithm.lr = 1e300) are not saved: saved, they
  // were a checkpoint from_pretrained refuses, published with exit 0. Checked before anything is
  // written.
  for (const ParamTensor& t : tensors_)
    if (const std::string bad = not_finite_in(t.name, {host + t.offset, size_t(t.numel)}); !bad.empty())
      throw NotFiniteWeights("the weights are not all finite numbers: " + bad +
                             " (an update diverged: a learning rate too large for the model?)");
  std::filesystem::create_directories(dir);
  ModelConfig c = config_;
  c.torch_dtype = "float32";
  std::vector<TensorView> views;
  for (const ParamTensor& t : tensors_)
    views.push_back({t.name, DType::F32, t.shape, reinterpret_cast<const std::byte*>(host + t.offset),
                     t.numel * sizeof(float)});
  write_checkpoint(dir, views, uint64_t(4) << 30);
  write_config(c, (dir / "config.json").string());
  write_generation_config(c, (dir / "generation_config.json").string());
}

void Transformer::ensure_rope(int64_t positions) {
  if (positions <= rope_positions_) return;
  positions = std::max<int64_t>(positions, 2 * rope_positions_);  // amortise regrowth in decode
  const std::vector<float> inv = rope_inv_freq(config_);
  const int64_t half = int64_t(inv.size());
  std::vector<float> cos(size_t(positions * half)), sin(cos.size());
  for (int64_t p = 0; p < positions; p++)
    for (int64_t i = 0; i < half; i++) {
      const float angle = float(p) * inv[i];  // fp32 product, as transformers does
      cos[p * half + i] = std::cos(angle);
      sin[p * half + i] = std::sin(angle);
    }
  rope_cos_.assign_zero(cos.size());
  rope_sin_.assign_zero(sin.size());
  rope_cos_.upload(cos.data(), cos.size());
  rope_sin_.upload(sin.data(), sin.size());
  rope_positions_ = positions;
}

void Transformer::forward_layers(const SequenceBatch& batch, Keep keep, KVCache* cache,
                                 std::span<const int32_t> cache_slots) {
  const ModelConfig& c = config_;
  const int64_t B = batch.B, T = batch.T, N = B * T, H = c.hidden_size, I = c.intermediate_size;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  const int64_t qd = nh * d, kd = nkv * d, L = c.num_hidden_layers;
  if (int64_t(batch.ids.size()) != N || int64_t(batch.lengths.size()) != B)
    throw std::invalid_argument("batch ids/lengths do not match B x T");
  for (int64_t i = 0; i < N; i++)
    if (batch.ids[i] < 0 || batch.ids[i] >= c.vocab_size)
      throw std::invalid_argument("token id " + std::to_string(batch.ids[i]) + " is outside the vocabulary (" +
                                  std::to_string(c.vocab_size) + " rows)");
  for (int32_t len : batch.lengths)
    if (len < 1 || len > T) throw std::invalid_argument("a sequence length is outside 1..T");
  ensure_rope(T);

  // Carve the arena. Everything: a slot per layer and the whole residual stream. LayerInputs: the
  // residual stream (each layer's input, and the last output) and ONE layer slot that backward
  // refills layer by layer. Nothing: one layer slot and two residual buffers that ping-pong.
  // The [N, width] tensors come first and the per-row statistics (rstd, lse: N and N x heads
  // floats) last, so every tensor starts 16 bytes into alignment whatever N is (the widths are
  // multiples of 4 in every Qwen2 and preset config), which the GPU kernels' 16-byte loads need.
  // act [N, I] holds SwiGLU's fp32 output for the down projection, which a Bf16 table's SwiGLU
  // writes only in bf16 (swiglu_for_gemm): such a model has none.
  // With bf16_training(), ln1 and ln2 are kept as their bf16 roundings only, N x H / 2 floats each
  // (H a multiple of 8: the tensors after them stay 16-byte aligned), and so is SwiGLU's output,
  // N x I / 2 floats (I a multiple of 8), which backward reads for the down projection's dw:
  // kept, not made again (on an H100 the second SwiGLU pass was 5.7 ms of a 1.5B step of 166 ms).
  const bool norms16 = bf16_training();
  // A prefill stores the keys and values it made, from fp32 k and v: it keeps the unfused path.
  // Gate and up as one GEMM where their weights are one matrix (build_layout's order).
  const LayerWeights w0 = layer_weights(0, false);
  const bool att16 = attention16() && !cache && qkv_one_matrix(w0);
  const bool mlp_rows = mlp_rows16() && gate_up_one_matrix(w0);
  const int64_t ln = norms16 ? H / 2 : H, act16 = norms16 ? I / 2 : 0;
  // The gate and up slots: fp32 gate and up, 2 I floats a row; with mlp_rows the GEMM's bf16 rows
  // [gate | up], I floats, which the q/k/v GEMM's fp32 rows (qd + 2 kd) borrow before it
  // (att16; every Qwen2 config has I >= qd + 2 kd). At 1.5B that is 35 KB a token a layer less.
  const int64_t mlp_slot = mlp_rows ? std::max(I, qd + 2 * kd) : 2 * I;
  const int64_t per_layer = N * (H + 2 * ln + 2 + 2 * qd + 2 * kd + nh + mlp_slot + act16);
  const int64_t layer_slots = keep == Keep::Everything ? L : 1, res_slots = keep == Keep::Nothing ? 2 : L + 1;
  const int64_t act = ops_->swiglu_forward_w16 ? 0 : N * I;
  const size_t need = size_t(layer_slots * per_layer + res_slots * N * H + N * (2 * H + 1) + act);
  acts_.ensure(need);
  float* p = acts_.data();
  auto take = [&](int64_t n) { float* r = p; p += n; return r; };
  std::vector<float*> res(static_cast<size_t>(res_slots));
  for (auto& r : res) r = take(N * H);
  layer_acts_.assign(size_t(L), {});
  for (int64_t l = 0; l < layer_slots; l++) {
    LayerActs& a = layer_acts_[size_t(l)];
    a.ln1 = take(N * ln), a.q = take(N * qd), a.k = take(N * kd), a.v = take(N * kd);
    a.att = take(N * qd), a.h = take(N * H), a.ln2 = take(N * ln);
    if (norms16) {
      a.ln1_16 = reinterpret_cast<uint16_t*>(a.ln1), a.ln2_16 = reinterpret_cast<uint16_t*>(a.ln2);
      a.ln1 = a.ln2 = nullptr;
    }
    if (mlp_rows) {
      a.gate = take(N * mlp_slot), a.up = nullptr;
      a.gate_up16 = reinterpret_cast<uint16_t*>(a.gate);  // N rows of 2 I bf16 values
    } else {
      a.gate = take(N * I), a.up = take(N * I);
    }
    if (norms16) a.act16 = reinterpret_cast<uint16_t*>(take(N * act16));
    if (att16) {  // N (2 qd + 2 kd) bf16 values in the N (qd + 2 kd) floats of q, k and v
      a.q16 = reinterpret_cast<uint16_t*>(a.q), a.k16 = a.q16 + N * qd, a.v16 = a.k16 + N * kd;
      a.att16 = a.v16 + N * kd;
      a.q = a.k = a.v = nullptr;
      a.qkv = a.gate;
    }
  }
  lnf_ = take(N * H), act_ = act ? take(act) : nullptr, tmp_ = take(N * H);
  for (int64_t l = 0; l < layer_slots; l++) {
    LayerActs& a = layer_acts_[size_t(l)];
    a.rstd1 = take(N), a.lse = take(N * nh), a.rstd2 = take(N);
  }
  rstdf_ = take(N);
  for (int64_t l = 0; l < L; l++) {
    LayerActs& a = layer_acts_[size_t(l)];
    if (layer_slots == 1) a = layer_acts_[0];
    a.res_in = res_slots == 2 ? res[size_t(l % 2)] : res[size_t(l)];
    a.res_out = res_slots == 2 ? res[size_t((l + 1) % 2)] : res[size_t(l + 1)];
  }

  // The batch's indices on the backend: positions, ids (embedding forward and backward), lengths.
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; n++) pos[n] = int32_t(n % T);
  positions_.ensure(size_t(N));
  positions_.upload(pos.data(), size_t(N));
  ids_.ensure(size_t(N));
  ids_.upload(batch.ids.data(), size_t(N));
  lengths_.ensure(size_t(B));
  lengths_.upload(batch.lengths.data(), size_t(B));
  fwd_B_ = B, fwd_T_ = T, fwd_kept_ = keep != Keep::Nothing;
  fwd_recomputes_ = keep == Keep::LayerInputs;
  fwd_batch_ = batch;

  if (cache) {  // row b*T + t to slot cache_slots[b], position t; padding skipped
    if (int64_t(cache_slots.size()) != B) throw std::invalid_argument("forward_layers: one cache slot per sequence");
    std::vector<int32_t> where(static_cast<size_t>(2 * N));
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++) {
        where[b * T + t] = cache_slots[size_t(b)];
        where[N + b * T + t] = t < batch.lengths[b] ? int32_t(t) : -1;
      }
    step_idx_.ensure(where.size());
    step_idx_.upload(where.data(), where.size());
  }

  ops_->embedding_forward(layer_acts_[0].res_in, ids_.data(), params_.data() + embed_off_, N, H);
  for (int64_t l = 0; l < L; l++) {
    // Each layer's residual add runs in the next layer's input norm (residual_norm_for_gemms: one
    // pass, where an add and a norm read the sum again); the last layer's, before the final norm.
    layer_forward(l, N, l + 1 < L ? LayerEnd::Down : LayerEnd::ResidualAdd,
                  l > 0 ? layer_acts_[size_t(l - 1)].h : nullptr);
    if (cache) {
      const LayerActs& a = layer_acts_[size_t(l)];
      store_kv(*cache, l, a.k, a.v, step_idx_.data(), step_idx_.data() + N, N);
    }
  }
  ops_->rmsnorm_forward(lnf_, rstdf_, layer_acts_[size_t(L - 1)].res_out, params_.data() + norm_off_, N, H,
                        float(c.rms_norm_eps));
}

// Layer l of the batch forward_layers() set up, from layer_acts_[l].res_in (or, with pending_h,
// from the previous layer's h and down projection, added here). With LayerEnd::GateUp it stops once
// backward has what it needs (gate and up): the recomputation in backward() skips the down
// projection and the residual add, whose output (the next layer's input) is already kept.
void Transformer::layer_forward(int64_t l, int64_t N, LayerEnd end, const float* pending_h) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, I = c.intermediate_size, nh = c.num_attention_heads;
  const int64_t nkv = c.num_key_value_heads, d = c.head_dim, qd = nh * d, kd = nkv * d;
  const kernels::Ops& o = *ops_;
  const kernels::AttentionShape shape{fwd_B_, fwd_T_, nh, nkv, d, fwd_T_ * kd, lengths_.data()};
  const LayerWeights w = layer_weights(l, false);
  const LayerActs& a = layer_acts_[size_t(l)];
  const GemmInput ln1 = pending_h
                            ? residual_norm_for_gemms(a.res_in, a.ln1, a.rstd1, pending_h, tmp_, w.ln1, N, a.ln1_16)
                            : norm_for_gemms(a.ln1, a.rstd1, a.res_in, w.ln1, N, a.ln1_16);
  if (a.q16) {  // attention16(): one q/k/v GEMM, and the attention's operands made once in bf16
    gemm_forward(a.qkv, ln1, w.wq, w.bq, N, H, qd + 2 * kd);
    o.rope_round_qkv_w16(a.q16, a.k16, a.v16, a.qkv, positions_.data(), rope_cos_.data(), rope_sin_.data(), N, nh,
                         nkv, d);
    o.attention_forward_w16(a.att, a.att16, a.lse, a.q16, a.k16, a.v16, shape);
    gemm_forward(tmp_, GemmInput{nullptr, a.att16}, w.wo, w.bo, N, qd, H);
  } else {
    gemm_forward(a.q, ln1, w.wq, w.bq, N, H, qd);
    gemm_forward(a.k, ln1, w.wk, w.bk, N, H, kd);
    gemm_forward(a.v, ln1, w.wv, w.bv, N, H, kd);
    o.rope_forward(a.q, positions_.data(), rope_cos_.data(), rope_sin_.data(), N, nh, d);
    o.rope_forward(a.k, positions_.data(), rope_cos_.data(), rope_sin_.data(), N, nkv, d);
    o.attention_forward(a.att, a.lse, a.q, a.k, a.v, shape);
    gemm_forward(tmp_, a.att, w.wo, w.bo, N, qd, H);
  }
  const GemmInput ln2 = residual_norm_for_gemms(a.h, a.ln2, a.rstd2, a.res_in, tmp_, w.ln2, N, a.ln2_16);
  if (a.gate_up16) {  // mlp_rows16(): one GEMM over [Wg; Wu] into bf16, SwiGLU on its rows (backward's too)
    o.matmul_forward_o16(a.gate_up16, ln2.x16, weights16(w.wg), N, H, 2 * I);
    o.swiglu_rows_w16(a.act16, a.gate_up16, N, I);
  } else {
    gemm_forward(a.gate, ln2, w.wg, w.bg, N, H, I);
    gemm_forward(a.up, ln2, w.wu, w.bu, N, H, I);
    if (a.act16) o.swiglu_forward_w16(nullptr, a.act16, a.gate, a.up, N * I);  // backward's too
  }
  if (end == LayerEnd::GateUp) return;
  const GemmInput act = a.act16 ? GemmInput{nullptr, a.act16} : swiglu_for_gemm(act_, a.gate, a.up, N * I);
  gemm_forward(tmp_, act, w.wd, w.bd, N, I, H);
  if (end == LayerEnd::ResidualAdd) o.add(a.res_out, a.h, tmp_, N * H);
}

std::vector<float> Transformer::logits(const SequenceBatch& batch) {
  forward_layers(batch, Keep::Nothing);
  const int64_t N = batch.B * batch.T, V = config_.vocab_size, H = config_.hidden_size;
  kernels::Buffer<float> dev(*ops_, size_t(N * V));
  gemm_forward(dev.data(), lnf_, params_.data() + head_off_, nullptr, N, H, V);
  std::vector<float> out(static_cast<size_t>(N * V));
  dev.download(out.data(), out.size());
  for (int64_t b = 0; b < batch.B; b++)
    for (int64_t t = batch.lengths[b]; t < batch.T; t++)
      std::fill_n(out.begin() + (b * batch.T + t) * V, V, 0.f);
  return out;
}

// The rows of the last forward that predict a token: row (b, t-1) predicts ids[b, t]; on the
// host for the loops here and on the backend for the gathers.
void Transformer::lm_head_rows(const SequenceBatch& batch) {
  head_rows_.clear();
  head_targets_.clear();
  for (int64_t b = 0; b < batch.B; b++)
    for (int64_t t = 1; t < batch.lengths[b]; t++) {
      head_rows_.push_back(int32_t(b * batch.T + t - 1));
      head_targets_.push_back(batch.ids[b * batch.T + t]);
    }
  head_rows_dev_.ensure(std::max<size_t>(head_rows_.size(), 1));
  head_rows_dev_.upload(head_rows_.data(), head_rows_.size());
  head_targets_dev_.ensure(std::max<size_t>(head_targets_.size(), 1));
  head_targets_dev_.upload(head_targets_.data(), head_targets_.size());
}

HeadTiles Transformer::head_tiles(int64_t R, bool for_backward) const {
  if (head_tiles_override_.rows > 0) {
    const int64_t rows = std::max<int64_t>(R, 1);
    return {std::min(head_tiles_override_.rows, rows), std::min(head_tiles_override_.cols, config_.vocab_size),
            for_backward && head_tiles_override_.keep && head_tiles_override_.rows >= rows};
  }
  return plan_head_tiles(R, config_.vocab_size, for_backward);
}

// The head's scratch for tiles t (memory_plan.h): a row block's gathered rows x and their
// gradients dx [t.rows, H], every head row's dlogp and dentropy [R], and the logits tile
// [t.rows, t.cols] unless the logits are kept (head_logits_). Returns x.
float* Transformer::take_head_scratch(const HeadTiles& t, int64_t R) {
  const int64_t H = config_.hidden_size;
  head_scratch_.ensure(size_t(2 * t.rows * H + 2 * std::max<int64_t>(R, 1) + (t.keep ? 0 : t.rows * t.cols)));
  if (t.cols < config_.vocab_size) head_state_.ensure(size_t(4 * R));
  return head_scratch_.data();
}

size_t Transformer::head_bytes() const {
  return sizeof(float) * (head_scratch_.size() + head_logits_.size() + head_lse_.size() + head_logp_.size() +
                          head_entropy_.size()) +
         sizeof(double) * head_state_.size() + sizeof(int32_t) * (head_rows_dev_.size() + head_targets_dev_.size()) +
         sizeof(uint16_t) * head_dlogits16_.size();
}

// The LM head over the vocabulary's column blocks (the tiles of memory_plan.h): for each row
// block, its rows gathered (and rounded for the GEMMs once, with a Bf16 table), then per column
// block the logits of every row of the block, whose statistics token_stats carries to the next.
TokenScores Transformer::score(const SequenceBatch& batch, float temperature, bool for_backward) {
  if (!(temperature > 0.f)) throw std::invalid_argument("scoring temperature must be > 0");
  forward_layers(batch, !for_backward ? Keep::Nothing : recompute_ ? Keep::LayerInputs : Keep::Everything);
  lm_head_rows(batch);
  const int64_t H = config_.hidden_size, V = config_.vocab_size, R = int64_t(head_rows_.size());
  fwd_inv_temp_ = 1.f / temperature;
  head_lse_.ensure(size_t(std::max<int64_t>(R, 1)));
  head_logp_.ensure(size_t(std::max<int64_t>(R, 1)));
  head_entropy_.ensure(size_t(std::max<int64_t>(R, 1)));
  const HeadTiles tiles = head_tiles(R, for_backward);
  head_logits_kept_ = tiles.keep;
  if (tiles.keep) head_logits_.ensure(size_t(std::max<int64_t>(R * V, 1)));
  float* x = take_head_scratch(tiles, R);
  float* tile = x + 2 * tiles.rows * H + 2 * std::max<int64_t>(R, 1);
  const float* head_w = params_.data() + head_off_;
  for (int64_t r0 = 0; r0 < R; r0 += tiles.rows) {
    const int64_t n = std::min(tiles.rows, R - r0);
    ops_->gather_rows(x, lnf_, head_rows_dev_.data() + r0, n, H);
    const GemmInput in = rounded_for_gemms(x, n * H);
    for (int64_t v0 = 0; v0 < V; v0 += tiles.cols) {
      const int64_t cols = std::min(tiles.cols, V - v0);
      float* lg = tiles.keep ? head_logits_.data() + v0 * n : tile;  // kept: block by block, every row
      gemm_forward(lg, in, head_w + v0 * H, nullptr, n, H, cols);
      ops_->token_stats(head_lse_.data() + r0, head_logp_.data() + r0, head_entropy_.data() + r0,
                        cols < V ? head_state_.data() + 4 * r0 : nullptr, lg, head_targets_dev_.data() + r0, n, v0,
                        cols, V, fwd_inv_temp_);
    }
  }
  std::vector<float> logp(static_cast<size_t>(R)), entropy(static_cast<size_t>(R));
  head_logp_.download(logp.data(), size_t(R));
  head_entropy_.download(entropy.data(), size_t(R));
  TokenScores s;
  s.B = batch.B, s.T = batch.T;
  s.logp.assign(size_t(batch.B * batch.T), 0.f);
  s.entropy.assign(s.logp.size(), 0.f);
  for (int64_t i = 0; i < R; i++) {
    s.logp[head_rows_[i] + 1] = logp[i];
    s.entropy[head_rows_[i] + 1] = entropy[i];
  }
  return s;
}

void Transformer::backward(std::span<const float> dlogp, std::span<const float> dentropy) {
  if (!fwd_kept_) throw std::logic_error("backward() needs a preceding score(..., for_backward = true)");
  const ModelConfig& c = config_;
  const int64_t B = fwd_B_, T = fwd_T_, N = B * T, H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  const int64_t qd = nh * d, kd = nkv * d, L = c.num_hidden_layers, R = int64_t(head_rows_.size());
  if ((!dlogp.empty() && int64_t(dlogp.size()) != N) || (!dentropy.empty() && int64_t(dentropy.size()) != N))
    throw std::invalid_argument("backward(): dlogp/dentropy must have B * T entries");
  grads_storage();
  const kernels::Ops& o = *ops_;
  const bool grads16 = bf16_training();
  // The weight gradients zero_grad() left unset are written by this backward's products, where
  // each runs: in the bf16 step with rows for the LM head (its product writes the head's).
  const bool write_dw = weight_grads_unset_ && grads16 && R > 0;
  if (!write_dw) fill_unset_weight_grads();
  weight_grads_unset_ = false;
  const kernels::GemmWrites dw_write = write_dw ? kernels::kWriteDw : kernels::kAddBoth;

  // Scratch: dres, dlnf [N,H]; datt, dq [N,qd]; dk, dv [N,kd]; dact [N,I]; then dgate, dup [N,I]
  // in fp32, or with a Bf16 table the layers' GEMM output gradients in bf16 (layer_backward_grads16):
  // dgate16, dup16 [N, I] and dout16, the other products' [N, max(H, qd + 2 kd)], in whole floats
  // (model/memory_plan.cpp's backward_scratch).
  const int64_t grads16_floats = (N * (2 * I + std::max(H, qd + 2 * kd)) + 1) / 2;
  bwd_.ensure(size_t(N * (2 * H + 2 * qd + 2 * kd + I) + (grads16 ? grads16_floats : 2 * N * I)));
  float* p = bwd_.data();
  auto take = [&](int64_t n) { float* r = p; p += n; return r; };
  float *dres = take(N * H), *dln = take(N * H), *datt = take(N * qd), *dq = take(N * qd), *dk = take(N * kd),
        *dv = take(N * kd), *dact = take(N * I);
  float *dgate = grads16 ? nullptr : take(N * I), *dup = grads16 ? nullptr : take(N * I);
  uint16_t* dgate16 = grads16 ? reinterpret_cast<uint16_t*>(p) : nullptr;
  uint16_t *dup16 = grads16 ? dgate16 + N * I : nullptr, *dout16 = grads16 ? dup16 + N * I : nullptr;

  // LM head, tile by tile as in score(): dlogits -> d(final norm output) and the head's weight
  // gradient, each column block's written once per row block (once, unless the rows are split).
  o.fill_zero(dln, N * H);
  HeadTiles tiles = head_tiles(R, /*for_backward=*/true);  // score()'s
  tiles.keep = head_logits_kept_;  // false in a second fp32 backward(): they hold dlogits now
  float* x = take_head_scratch(tiles, R);
  float *dx = x + tiles.rows * H, *gl = dx + tiles.rows * H, *ge = gl + std::max<int64_t>(R, 1);
  float* tile = ge + std::max<int64_t>(R, 1);
  std::vector<float> gl_host(static_cast<size_t>(R)), ge_host(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; i++) {
    const int64_t row = head_rows_[i];
    gl_host[i] = dlogp.empty() ? 0.f : dlogp[row + 1];
    ge_host[i] = dentropy.empty() ? 0.f : dentropy[row + 1];
  }
  o.upload(gl, gl_host.data(), sizeof(float) * size_t(R));
  o.upload(ge, ge_host.data(), sizeof(float) * size_t(R));
  const float* head_w = params_.data() + head_off_;
  float* head_g = grads_.data() + head_off_;
  // With bf16 output gradients the tile's dlogits are written only in bf16, to a buffer of their
  // own, for the GEMMs that would otherwise round them (read 4 bytes, write 2) before reading them.
  uint16_t* dl16 = nullptr;
  if (grads16) {
    head_dlogits16_.ensure(size_t(tiles.rows * tiles.cols));
    dl16 = head_dlogits16_.data();
  }
  for (int64_t r0 = 0; r0 < R; r0 += tiles.rows) {
    const int64_t n = std::min(tiles.rows, R - r0);
    o.gather_rows(x, lnf_, head_rows_dev_.data() + r0, n, H);
    const GemmInput in = rounded_for_gemms(x, n * H);
    if (!grads16) o.fill_zero(dx, n * H);
    for (int64_t v0 = 0; v0 < V; v0 += tiles.cols) {
      const int64_t cols = std::min(tiles.cols, V - v0);
      float* lg = tiles.keep ? head_logits_.data() + v0 * n : tile;  // score()'s block
      if (!tiles.keep) gemm_forward(lg, in, head_w + v0 * H, nullptr, n, H, cols);
      if (grads16) {
        o.token_stats_backward_w16(dl16, lg, head_targets_dev_.data() + r0, head_lse_.data() + r0,
                                   head_entropy_.data() + r0, gl + r0, ge + r0, n, v0, cols, fwd_inv_temp_);
        o.matmul_backward_g16(dx, head_g + v0 * H, dl16, in.x16, weights16(head_w + v0 * H), n, H, cols,
                              (v0 == 0 ? kernels::kWriteDinp : kernels::kAddBoth) |
                                  (r0 == 0 ? dw_write : kernels::kAddBoth));
        continue;
      }
      o.token_stats_backward(lg, lg, head_targets_dev_.data() + r0, head_lse_.data() + r0,
                             head_entropy_.data() + r0, gl + r0, ge + r0, n, v0, cols, fwd_inv_temp_);
      gemm_backward(dx, head_g + v0 * H, nullptr, lg, in, head_w + v0 * H, n, H, cols);
    }
    o.scatter_add_rows(dln, dx, head_rows_dev_.data() + r0, n, H);
  }
  // Kept logits that the fp32 path overwrote with dlogits are gone: a second backward recomputes.
  head_logits_kept_ = tiles.keep && grads16;

  o.fill_zero(dres, N * H);
  if (grads16)  // the last layer's GEMMs read d(res_out) as dout16
    o.rmsnorm_backward_w16(dres, dout16, grads_.data() + norm_off_, dln, layer_acts_[size_t(L - 1)].res_out,
                           params_.data() + norm_off_, rstdf_, N, H);
  else
    o.rmsnorm_backward(dres, grads_.data() + norm_off_, dln, layer_acts_[size_t(L - 1)].res_out,
                       params_.data() + norm_off_, rstdf_, N, H);

  const kernels::AttentionShape shape{B, T, nh, nkv, d, T * kd, lengths_.data()};
  // With a Bf16 table, the layers' GEMM output gradients go to the GEMMs in bf16, rounded by their
  // producers (kernels::Ops::swiglu_backward_w16, to_bf16). A model with MLP biases keeps the fp32
  // path: their gradients are column sums of fp32 dgate and dup (bf16_training_buffers).
  for (int64_t l = L - 1; l >= 0; l--) {
    const LayerWeights w = layer_weights(l, false);
    const LayerWeights g = layer_weights(l, true);
    if (fwd_recomputes_) layer_forward(l, N, LayerEnd::GateUp, nullptr);  // refills the one layer slot
    const LayerActs& a = layer_acts_[size_t(l)];
    if (grads16) {
      layer_backward_grads16(w, g, a, dres, dln, datt, dq, dk, dv, dact, dgate16, dup16, dout16, l > 0, shape,
                             dw_write);
      continue;
    }
    // dres holds d(res_out). MLP branch: res_out = h + down(silu(gate) * up).
    const GemmInput act = swiglu_for_gemm(act_, a.gate, a.up, N * I);  // recomputed rather than stored
    o.fill_zero(dact, N * I);
    gemm_backward(dact, g.wd, g.bd, dres, act, w.wd, N, I, H);
    o.swiglu_backward(dgate, dup, dact, a.gate, a.up, N * I);
    o.fill_zero(dln, N * H);
    const GemmInput ln2 = rounded_for_gemms(a.ln2, N * H);
    gemm_backward(dln, g.wg, g.bg, dgate, ln2, w.wg, N, H, I);
    gemm_backward(dln, g.wu, g.bu, dup, ln2, w.wu, N, H, I);
    o.rmsnorm_backward(dres, g.ln2, dln, a.h, w.ln2, a.rstd2, N, H);  // dres := d(h)
    // Attention branch: h = res_in + o_proj(attention(rope(q), rope(k), v)).
    o.fill_zero(datt, N * qd);
    gemm_backward(datt, g.wo, g.bo, dres, a.att, w.wo, N, qd, H);
    o.attention_backward(dq, dk, dv, datt, a.att, a.lse, a.q, a.k, a.v, shape);
    o.rope_backward(dq, positions_.data(), rope_cos_.data(), rope_sin_.data(), N, nh, d);
    o.rope_backward(dk, positions_.data(), rope_cos_.data(), rope_sin_.data(), N, nkv, d);
    o.fill_zero(dln, N * H);
    const GemmInput ln1 = rounded_for_gemms(a.ln1, N * H);
    gemm_backward(dln, g.wq, g.bq, dq, ln1, w.wq, N, H, qd);
    gemm_backward(dln, g.wk, g.bk, dk, ln1, w.wk, N, H, kd);
    gemm_backward(dln, g.wv, g.bv, dv, ln1, w.wv, N, H, kd);
    o.rmsnorm_backward(dres, g.ln1, dln, a.res_in, w.ln1, a.rstd1, N, H);  // dres := d(res_in)
  }
  o.embedding_backward(grads_.data() + embed_off_, dres, ids_.data(), N, H);
}

// backward()'s layer with the GEMM output gradients in bf16: the same products on the same bf16
// operands as the fp32 path's (whose GEMMs round dout as they read it), so the same gradients,
// but no fp32 dgate or dup is written or read, no GEMM rounds a gradient, and the first product
// into each of dact, dln and datt writes it rather than adding to a zero fill.
void Transformer::layer_backward_grads16(const LayerWeights& w, const LayerWeights& g, const LayerActs& a, float* dres,
                                         float* dln, float* datt, float* dq, float* dk, float* dv, float* dact,
                                         uint16_t* dgate16, uint16_t* dup16, uint16_t* dout16,
                                         bool round_dres_in, const kernels::AttentionShape& shape,
                                         kernels::GemmWrites dw_write) {
  const ModelConfig& c = config_;
  const kernels::Ops& o = *ops_;
  const int64_t N = fwd_B_ * fwd_T_, H = c.hidden_size, I = c.intermediate_size, nh = c.num_attention_heads;
  const int64_t nkv = c.num_key_value_heads, d = c.head_dim, qd = nh * d, kd = nkv * d;
  // A bias's gradient: the column sums of the fp32 dout, the only part of the product that wants it.
  auto bias_grad = [&](float* dbias, const float* dout, int64_t IC, int64_t OC) {
    if (dbias) o.matmul_backward_a16w16(nullptr, nullptr, dbias, dout, nullptr, nullptr, N, IC, OC);
  };
  // dinp written by a buffer's first product (or added to), the weight's gradient as dw_write says.
  const kernels::GemmWrites kWrite = kernels::kWriteDinp | dw_write, kAdd = dw_write;
  // MLP branch: res_out = h + down(silu(gate) * up); dres holds d(res_out).
  const uint16_t* act16 = a.act16;  // SwiGLU's output as the forward kept it
  if (a.gate_up16) {  // mlp_rows16() (no MLP biases): dact in bf16 in dact's slot, rows [dgate | dup], one GEMM
    if (dup16 != dgate16 + N * I) throw std::logic_error("backward(): dgate16 and dup16 are not adjacent");
    auto* dact16 = reinterpret_cast<uint16_t*>(dact);
    o.matmul_backward_g16_dinp16(dact16, g.wd, dout16, act16, weights16(w.wd), N, I, H, dw_write);
    o.swiglu_rows_backward_w16(dgate16, dact16, a.gate_up16, N, I);
    o.matmul_backward_g16(dln, g.wg, dgate16, a.ln2_16, weights16(w.wg), N, H, 2 * I, kWrite);  // ln2 as kept
  } else {
    o.matmul_backward_g16(dact, g.wd, dout16, act16, weights16(w.wd), N, I, H, kWrite);
    bias_grad(g.bd, dres, I, H);
    o.swiglu_backward_w16(dgate16, dup16, dact, a.gate, a.up, N * I);
    o.matmul_backward_g16(dln, g.wg, dgate16, a.ln2_16, weights16(w.wg), N, H, I, kWrite);  // ln2 as kept
    o.matmul_backward_g16(dln, g.wu, dup16, a.ln2_16, weights16(w.wu), N, H, I, kAdd);
  }
  o.rmsnorm_backward_w16(dres, dout16, g.ln2, dln, a.h, w.ln2, a.rstd2, N, H);  // dres := d(h), and rounded
  // Attention branch: h = res_in + o_proj(attention(rope(q), rope(k), v)).
  const GemmInput att = a.att16 ? GemmInput{nullptr, a.att16} : rounded_for_gemms(a.att, N * qd);
  o.matmul_backward_g16(datt, g.wo, dout16, att.x16, weights16(w.wo), N, qd, H, kWrite);
  bias_grad(g.bo, dres, qd, H);
  if (a.q16) {  // attention16(): from the kept bf16 operands, and one q/k/v GEMM with dout16 its rows
    o.attention_backward_w16(dq, dk, dv, datt, a.att, a.lse, a.q16, a.k16, a.v16, shape);
    // The q, k and v biases' gradients in the same pass, adjacent as the biases are (qkv_one_matrix).
    if (g.bq && (g.bk != g.bq + qd || g.bv != g.bk + kd))
      throw std::logic_error("backward(): the q, k and v bias gradients are not adjacent");
    o.rope_backward_round_w16(dout16, dq, dk, dv, g.bq, positions_.data(), rope_cos_.data(), rope_sin_.data(), N, nh,
                              nkv, d);
    o.matmul_backward_g16(dln, g.wq, dout16, a.ln1_16, weights16(w.wq), N, H, qd + 2 * kd, kWrite);
    o.rmsnorm_backward_w16(dres, round_dres_in ? dout16 : nullptr, g.ln1, dln, a.res_in, w.ln1, a.rstd1, N, H);
    return;
  }
  o.attention_backward(dq, dk, dv, datt, a.att, a.lse, a.q, a.k, a.v, shape);
  o.rope_backward(dq, positions_.data(), rope_cos_.data(), rope_sin_.data(), N, nh, d);
  o.rope_backward(dk, positions_.data(), rope_cos_.data(), rope_sin_.data(), N, nkv, d);
  // dq, dk and dv lie back to back in backward()'s scratch, as dq16, dk16 and dv16 do: one rounding.
  uint16_t *dq16 = dout16, *dk16 = dq16 + N * qd, *dv16 = dk16 + N * kd;
  if (dk != dq + N * qd || dv != dk + N * kd) throw std::logic_error("backward(): dq, dk, dv are not adjacent");
  o.to_bf16(dq16, dq, N * (qd + 2 * kd));
  bias_grad(g.bq, dq, H, qd);
  bias_grad(g.bk, dk, H, kd);
  bias_grad(g.bv, dv, H, kd);
  o.matmul_backward_g16(dln, g.wq, dq16, a.ln1_16, weights16(w.wq), N, H, qd, kWrite);  // ln1 as kept
  o.matmul_backward_g16(dln, g.wk, dk16, a.ln1_16, weights16(w.wk), N, H, kd, kAdd);
  o.matmul_backward_g16(dln, g.wv, dv16, a.ln1_16, weights16(w.wv), N, H, kd, kAdd);
  // dres := d(res_in); dout16 (read by the q/k/v products above, done by now) its rounding
  o.rmsnorm_backward_w16(dres, round_dres_in ? dout16 : nullptr, g.ln1, dln, a.res_in, w.ln1, a.rstd1, N, H);
}

std::vector<float> Transformer::prefill(KVCache& cache, const SequenceBatch& prompts) {
  const float* dev = prefill_on_backend(cache, prompts);
  std::vector<float> out(static_cast<size_t>(prompts.B * config_.vocab_size));
  ops_->download(out.data(), dev, sizeof(float) * out.size());
  return out;
}

void Transformer::decode(KVCache& cache, std::span<const int32_t> tokens, std::span<const int32_t> slot,
                         std::span<const int32_t> pos, std::vector<float>& logits) {
  const float* dev = decode_on_backend(cache, tokens, slot, pos);
  logits.resize(tokens.size() * size_t(config_.vocab_size));
  ops_->download(logits.data(), dev, sizeof(float) * logits.size());
}

namespace {
void check_cache_type(const KVCache& cache, const kernels::Ops& ops) {
  if (cache.bf16 != (ops.kv_store_w16 != nullptr))
    throw std::invalid_argument(std::string("the KV cache holds ") + (cache.bf16 ? "bf16" : "fp32") +
                                " but the model's " + ops.name + " table uses " + (cache.bf16 ? "fp32" : "bf16") +
                                ": make the cache with the model's ops()");
}
}  // namespace

const float* Transformer::prefill_on_backend(KVCache& cache, const SequenceBatch& prompts) {
  check_cache_type(cache, *ops_);
  if (prompts.B > cache.slots) throw std::invalid_argument("more prompts than KV-cache slots");
  for (int32_t len : prompts.lengths)
    if (len > cache.capacity) throw std::invalid_argument("a prompt is longer than the KV-cache capacity");
  const int64_t B = prompts.B, T = prompts.T, V = config_.vocab_size;
  if (int64_t(prompts.ids.size()) != B * T || int64_t(prompts.lengths.size()) != B)
    throw std::invalid_argument("batch ids/lengths do not match B x T");
  for (int32_t len : prompts.lengths)
    if (len < 1 || len > T) throw std::invalid_argument("a sequence length is outside 1..T");
  const auto prompt = [&](int64_t b) {
    const auto begin = prompts.ids.begin() + b * T;
    return std::vector<int32_t>(begin, begin + prompts.lengths[size_t(b)]);
  };
  // first[b]: the first prompt of the batch equal to prompt b (b itself when it is the first).
  std::vector<int32_t> first(static_cast<size_t>(B));
  std::vector<int32_t> distinct;  // the first copies, in batch order
  prefill_stats_ = {B, 0, 0, 0};
  {
    std::map<std::vector<int32_t>, int32_t> seen;
    for (int64_t b = 0; b < B; b++) {
      const int32_t at = prefill_duplicates_once_ ? seen.emplace(prompt(b), int32_t(b)).first->second : int32_t(b);
      first[size_t(b)] = at;
      prefill_stats_.tokens += prompts.lengths[size_t(b)];
      if (at != b) continue;
      distinct.push_back(at);
      prefill_stats_.computed_tokens += prompts.lengths[size_t(b)];
    }
  }
  const int64_t D = prefill_stats_.distinct_prompts = int64_t(distinct.size());
  prefill_logits_.ensure(size_t(B * V));
  if (D == B) {
    prefill_rows(cache, prompts, distinct, prefill_logits_.data());
  } else {
    // The distinct prompts into their first copies' slots, their logits into rows 0..D-1; then
    // every other copy's keys and values from its first copy's slot.
    std::vector<std::vector<int32_t>> rows;
    for (int32_t b : distinct) rows.push_back(prompt(b));
    prefill_rows(cache, SequenceBatch::from(rows), distinct, prefill_logits_.data());
    std::vector<int64_t> row_of(static_cast<size_t>(B));  // prompt b's logits row among the distinct ones
    for (int64_t u = 0; u < D; u++) row_of[size_t(distinct[size_t(u)])] = u;
    for (int64_t b = 0; b < B; b++) {
      row_of[size_t(b)] = row_of[size_t(first[size_t(b)])];
      if (first[size_t(b)] != b) cache.copy_positions(first[size_t(b)], b, prompts.lengths[size_t(b)]);
    }
    // Spread the rows out in place, last row first: row b's source row_of[b] <= b has not been
    // written yet, since every row written so far is above b.
    for (int64_t b = B - 1; b >= 0; b--)
      if (row_of[size_t(b)] != b)
        ops_->copy(prefill_logits_.data() + b * V, prefill_logits_.data() + row_of[size_t(b)] * V,
                   sizeof(float) * size_t(V));
  }
  fwd_kept_ = false;  // the activations are not a training forward
  return prefill_logits_.data();
}

void Transformer::prefill_rows(KVCache& cache, const SequenceBatch& prompts, std::span<const int32_t> slots,
                               float* logits) {
  const int64_t B = prompts.B, T = prompts.T, H = config_.hidden_size, V = config_.vocab_size;
  const kernels::Ops& o = *ops_;
  // Groups of prompts, each padded to its own longest prompt.
  const int64_t per_group = std::max<int64_t>(1, prefill_group_tokens_ / std::max<int64_t>(T, 1));
  for (int64_t b0 = 0; b0 < B; b0 += per_group) {
    const int64_t b1 = std::min(B, b0 + per_group);
    std::vector<std::vector<int32_t>> group;
    for (int64_t b = b0; b < b1; b++)
      group.emplace_back(prompts.ids.begin() + b * T, prompts.ids.begin() + b * T + prompts.lengths[size_t(b)]);
    const SequenceBatch g = SequenceBatch::from(group);
    forward_layers(g, Keep::Nothing, &cache, slots.subspan(size_t(b0), size_t(b1 - b0)));
    // Each prompt's last row, gathered, through the LM head.
    std::vector<int32_t> last_rows(static_cast<size_t>(g.B));
    for (int64_t b = 0; b < g.B; b++) last_rows[size_t(b)] = int32_t(b * g.T + g.lengths[size_t(b)] - 1);
    step_idx_.ensure(size_t(g.B));
    step_idx_.upload(last_rows.data(), size_t(g.B));
    kernels::Buffer<float> last(o, size_t(g.B * H));
    o.gather_rows(last.data(), lnf_, step_idx_.data(), g.B, H);
    gemm_forward(logits + b0 * V, last.data(), params_.data() + head_off_, nullptr, g.B, H, V);
  }
}

void Transformer::check_decode_rows(const KVCache& cache, std::span<const int32_t> slot,
                                    std::span<const int32_t> pos) const {
  check_cache_type(cache, *ops_);
  if (slot.size() != pos.size()) throw std::invalid_argument("decode(): size mismatch");
  // Each row its own slot: a row reads its slot's positions before this step's, and on a GPU the
  // decode attention may load those before the step's K/V are stored (attention_decode_tiles.cuh),
  // so a second row writing into the same slot would be read stale.
  std::vector<char> taken(static_cast<size_t>(std::max<int64_t>(cache.slots, 0)), 0);
  for (size_t r = 0; r < slot.size(); r++) {
    if (slot[r] < 0 || slot[r] >= cache.slots || pos[r] < 0 || pos[r] >= cache.capacity)
      throw std::invalid_argument("decode(): slot or position outside the KV cache");
    if (std::exchange(taken[size_t(slot[r])], 1))
      throw std::invalid_argument("decode(): slot " + std::to_string(slot[r]) + " given to two rows of one step");
  }
}

const float* Transformer::decode_on_backend(KVCache& cache, std::span<const int32_t> tokens,
                                            std::span<const int32_t> slot, std::span<const int32_t> pos) {
  const int64_t R = int64_t(tokens.size());
  if (int64_t(slot.size()) != R) throw std::invalid_argument("decode(): size mismatch");
  check_decode_rows(cache, slot, pos);
  for (const int32_t t : tokens)
    if (t < 0 || t >= config_.vocab_size) throw std::invalid_argument("decode(): token id out of range");
  // One upload, not three: on a GPU each is a copy staged through pinned memory and queued
  // (kernels/cuda/cuda_ops.cu), a few microseconds of the host's while the device may be idle.
  std::vector<int32_t> step_host(static_cast<size_t>(3 * R));
  std::copy(tokens.begin(), tokens.end(), step_host.begin());
  std::copy(slot.begin(), slot.end(), step_host.begin() + R);
  std::copy(pos.begin(), pos.end(), step_host.begin() + 2 * R);
  step_idx_.ensure(size_t(4 * R));
  step_idx_.upload(step_host.data(), step_host.size());
  return decode_step_on_backend(cache, R);
}

const float* Transformer::decode_on_backend(KVCache& cache, const int32_t* tokens, int64_t token_count,
                                            std::span<const int32_t> rows, std::span<const int32_t> slot,
                                            std::span<const int32_t> pos) {
  const int64_t R = int64_t(rows.size());
  if (int64_t(slot.size()) != R) throw std::invalid_argument("decode(): size mismatch");
  check_decode_rows(cache, slot, pos);
  for (const int32_t r : rows)
    if (r < 0 || r >= token_count) throw std::invalid_argument("decode(): a row's token is outside the tokens given");
  // Slots, positions and the rows to gather in one upload, then the tokens gathered in front of
  // them (4-byte rows copied bit for bit), where the recorded step reads them.
  std::vector<int32_t> step_host(static_cast<size_t>(3 * R));
  std::copy(slot.begin(), slot.end(), step_host.begin());
  std::copy(pos.begin(), pos.end(), step_host.begin() + R);
  std::copy(rows.begin(), rows.end(), step_host.begin() + 2 * R);
  step_idx_.ensure(size_t(4 * R));
  step_idx_.upload(step_host.data(), step_host.size(), size_t(R));
  ops_->gather_rows(reinterpret_cast<float*>(step_idx_.data()), reinterpret_cast<const float*>(tokens),
                    step_idx_.data() + 3 * R, R, 1);
  return decode_step_on_backend(cache, R);
}

const float* Transformer::decode_step_on_backend(KVCache& cache, int64_t R) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  const int64_t qd = nh * d, kd = nkv * d;
  // The whole cache's positions, not this step's: the tables then stay put while a generation runs,
  // and so does a recording of the step that points at them.
  ensure_rope(cache.capacity);
  fwd_kept_ = false;
  // Small per-step buffers: x, ln, q, k, v, att, tmp, gate, up, rstd, the logits; the step's
  // tokens, slots and positions on the backend.
  acts_.ensure(size_t(R * (4 * H + 3 * qd + 2 * kd + 2 * I + 1 + V)));
  float* p = acts_.data();
  auto take = [&](int64_t n) { float* r = p; p += n; return r; };
  // qkv: the q/k/v GEMM's output, or k and v apart; gate: gate and up, R x 2I.
  float *x = take(R * H), *ln = take(R * H), *tmp = take(R * H), *h = take(R * H), *q = take(R * qd),
        *att = take(R * qd), *qkv = take(R * (qd + 2 * kd)), *gate = take(2 * R * I), *rstd = take(R),
        *out = take(R * V);
  const int32_t *tok_d = step_idx_.data(), *slot_d = tok_d + R, *pos_d = tok_d + 2 * R;
  // The step's ops, from the token embeddings to the logits: everything a recording replays. Each
  // residual add is fused with the norm after it, the next layer's (or the final one); or, for a few
  // rows, with the product before it and the norm with the products after it.
  const bool fold_norms = decode_norms_fold(cache, R);
  const auto step = [&] {
    ops_->embedding_forward(x, tok_d, params_.data() + embed_off_, R, H);
    if (fold_norms) {
      decode_layers_folded(x, h, q, att, gate, rstd, out, cache, slot_d, pos_d, R);
      return;
    }
    GemmInput ln1 = norm_for_gemms(ln, rstd, x, layer_weights(0, false).ln1, R);
    for (int64_t l = 0; l < c.num_hidden_layers; l++) {
      const LayerWeights w = layer_weights(l, false);
      decode_qkv(q, qkv, ln1, w, cache, l, slot_d, pos_d, R);
      gemm_forward(tmp, attend_cache(att, q, cache, l, slot_d, pos_d, R), w.wo, w.bo, R, qd, H);
      const GemmInput ln2 = residual_norm_for_gemms(h, ln, rstd, x, tmp, w.ln2, R);
      gemm_forward(tmp, decode_gate_up(gate, ln2, w, R), w.wd, w.bd, R, I, H);
      const float* next_norm =
          l + 1 < c.num_hidden_layers ? layer_weights(l + 1, false).ln1 : params_.data() + norm_off_;
      ln1 = residual_norm_for_gemms(x, ln, rstd, h, tmp, next_norm, R);
    }
    gemm_forward(out, ln1, params_.data() + head_off_, nullptr, R, H, V);
  };
  const kernels::OpRecorder& recorder = ops_->recorder;
  if (!decode_graphs_on_ || !recorder.begin) {
    step();
    return out;
  }
  // A stale bf16 copy of the weights is rounded here, before a recording or replay reads it: inside
  // a recording the rounding would be recorded too and rerun on every replay.
  if (ops_->to_bf16) weights16(params_.data());
  decode_graphs_.use_key(decode_graph_key(cache));
  if (kernels::OpGraph* g = decode_graphs_.find(R)) {
    recorder.replay(g);
    decode_graphs_.note_replay();
    return out;
  }
  if (decode_graphs_.ready_to_record(R)) {
    kernels::OpGraph* g = nullptr;
    try {
      recorder.begin();
      step();
      g = recorder.end();
    } catch (const std::exception& e) {
      recorder.abandon();
      throw std::runtime_error("decode(): recording the step of " + std::to_string(R) +
                               " rows failed (model.decode_graphs = false runs it without): " + e.what());
    }
    decode_graphs_.add(R, g);
    recorder.replay(g);  // a recording runs nothing: this is the step
    decode_graphs_.note_replay();
    return out;
  }
  step();
  decode_graphs_.use_key(decode_graph_key(cache));  // the step may have grown a buffer or an op's scratch
  decode_graphs_.note_eager_step(R);
  return out;
}

DecodeGraphs::Key Transformer::decode_graph_key(const KVCache& cache) const {
  const auto at = [](const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); };
  return {at(acts_.data()),     acts_.size(),      at(step_idx_.data()), step_idx_.size(),  // step buffers
          at(params_.data()),   at(params16_.data()), at(gemm_in16_.data()), gemm_in16_.size(),  // weights, GEMM inputs
          at(rope_cos_.data()), at(rope_sin_.data()), uint64_t(rope_positions_),                // RoPE tables
          at(cache.k.data()),   at(cache.v.data()),   at(cache.k16.data()), at(cache.v16.data()),  // the KV cache
          uint64_t(cache.slots), uint64_t(cache.capacity),
          ops_->recorder.generation ? ops_->recorder.generation() : 0};  // the ops' own scratch
}

void Transformer::release_training_buffers() {
  fwd_kept_ = false;  // the layers' activations point into acts_
  for (kernels::Buffer<float>* b : {&acts_, &bwd_, &head_logits_, &head_scratch_, &head_lse_, &head_logp_,
                                    &head_entropy_})
    *b = kernels::Buffer<float>(*ops_);
  head_state_ = kernels::Buffer<double>(*ops_);
  head_rows_dev_ = kernels::Buffer<int32_t>(*ops_);
  head_targets_dev_ = kernels::Buffer<int32_t>(*ops_);
  head_dlogits16_ = kernels::Buffer<uint16_t>(*ops_);
  gemm_in16_ = kernels::Buffer<uint16_t>(*ops_);
  head_logits_kept_ = false;
}

void Transformer::set_decode_graphs(bool on) {
  decode_graphs_on_ = on;
  if (!on) decode_graphs_.clear();
}

}  // namespace azr::model
