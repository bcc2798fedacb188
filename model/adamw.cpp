#include "model/adamw.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "model/safetensors.h"
#include "model/transformer.h"

namespace azr::model {

GradClip measure_grad_clip(const kernels::Ops& ops, std::span<const float> grads, double max_norm) {
  const double norm = std::sqrt(ops.sum_squares(grads.data(), int64_t(grads.size())));
  const double coef = max_norm / (norm + 1e-6);
  return {norm, coef < 1.0 ? float(coef) : 1.f};
}

double clip_grad_norm(const kernels::Ops& ops, std::span<float> grads, double max_norm) {
  const GradClip clip = measure_grad_clip(ops, grads, max_norm);
  if (clip.scale < 1.f) ops.scale(grads.data(), clip.scale, int64_t(grads.size()));
  return clip.norm;
}

AdamW::AdamW(const kernels::Ops& ops, size_t num_params, AdamWSettings settings)
    : ops_(&ops), settings_(settings), m_(ops, num_params), v_(ops, num_params) {}

void AdamW::step(std::span<float> params, std::span<const float> grads, float grad_scale) {
  check_sizes(params, grads);
  update(params, nullptr, grads, grad_scale);
}

void AdamW::step(Transformer& model, std::span<const float> grads, float grad_scale) {
  std::span<float> params = model.parameters();
  check_sizes(params, grads);  // before the model's bf16 copy counts as written
  update(params, ops_->adamw_w16 ? model.weights16_for_writing() : nullptr, grads, grad_scale);
}

void AdamW::check_sizes(std::span<const float> params, std::span<const float> grads) const {
  if (params.size() != m_.size() || grads.size() != m_.size())
    throw std::invalid_argument("AdamW::step: parameter count differs from the optimizer's");
}

void AdamW::update(std::span<float> params, uint16_t* params16, std::span<const float> grads, float grad_scale) {
  step_++;
  const double bc1 = 1.0 - std::pow(settings_.beta1, double(step_));
  const double bc2 = 1.0 - std::pow(settings_.beta2, double(step_));
  const AdamWSettings& s = settings_;
  if (params16)
    ops_->adamw_w16(params.data(), params16, grads.data(), m_.data(), v_.data(), int64_t(m_.size()), float(s.lr),
                    float(s.beta1), float(s.beta2), float(s.eps), float(s.weight_decay), float(bc1), float(bc2),
                    grad_scale);
  else
    ops_->adamw(params.data(), grads.data(), m_.data(), v_.data(), int64_t(m_.size()), float(s.lr), float(s.beta1),
                float(s.beta2), float(s.eps), float(s.weight_decay), float(bc1), float(bc2), grad_scale);
}

void AdamW::set_file_order(std::vector<FlatRange> order) {
  size_t covered = 0;
  for (const FlatRange& r : order) {
    if (r.offset + r.numel > m_.size() || r.file_offset + r.numel > m_.size())
      throw std::invalid_argument("AdamW::set_file_order: a range outside the " + std::to_string(m_.size()) +
                                  " parameters");
    covered += r.numel;
  }
  if (covered != m_.size())
    throw std::invalid_argument("AdamW::set_file_order: the ranges cover " + std::to_string(covered) + " of " +
                                std::to_string(m_.size()) + " parameters");
  file_order_ = std::move(order);
}

namespace {

// Flat values from the file's order back to the buffers'.
std::vector<float> from_file_order(std::span<const float> from, const std::vector<FlatRange>& order) {
  std::vector<float> out(from.size());
  for (const FlatRange& r : order)
    std::copy_n(from.begin() + std::ptrdiff_t(r.file_offset), r.numel, out.begin() + std::ptrdiff_t(r.offset));
  return out;
}

}  // namespace

void AdamW::save(const std::filesystem::path& file) const {
  const int64_t n = int64_t(m_.size());
  // The writer reads the host: each moment's ranges downloaded straight into their places in the
  // file's order, one host copy a moment. Downloaded whole and then reordered, a GPU run held four
  // (16 bytes a parameter: 49 GB at 3B, in a checkpoint write).
  std::vector<float> m_copy, v_copy;
  const float *m = nullptr, *v = nullptr;
  if (file_order_.empty()) {
    m = kernels::host_view(*ops_, m_.span(), m_copy).data();
    v = kernels::host_view(*ops_, v_.span(), v_copy).data();
  } else {
    for (auto [state, copy, host] : {std::tuple{&m_, &m_copy, &m}, std::tuple{&v_, &v_copy, &v}}) {
      copy->resize(state->size());
      for (const FlatRange& r : file_order_)
        ops_->download(copy->data() + r.file_offset, state->data() + r.offset, r.numel * sizeof(float));
      *host = copy->data();
    }
  }
  const size_t bytes = m_.size() * sizeof(float);
  std::vector<TensorView> views = {
      {"exp_avg", DType::F32, {n}, reinterpret_cast<const std::byte*>(m), bytes},
      {"exp_avg_sq", DType::F32, {n}, reinterpret_cast<const std::byte*>(v), bytes}};
  auto num = [](double x) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return std::string(buf);
  };
  const Metadata meta = {{"step", std::to_string(step_)},
                         {"lr", num(settings_.lr)},
                         {"betas", num(settings_.beta1) + "," + num(settings_.beta2)},
                         {"eps", num(settings_.eps)},
                         {"weight_decay", num(settings_.weight_decay)}};
  write_safetensors(file, views, meta);
}

void AdamW::load(const std::filesystem::path& file) {
  SafetensorsFile f = SafetensorsFile::open(file);
  const TensorView& m = f.at("exp_avg");
  const TensorView& v = f.at("exp_avg_sq");
  if (m.dtype != DType::F32 || v.dtype != DType::F32 || size_t(m.numel()) != m_.size() ||
      size_t(v.numel()) != v_.size())
    throw SafetensorsError(file.string() + ": optimizer state holds " + std::to_string(m.numel()) +
                           " values per moment (F32 expected), the model has " + std::to_string(m_.size()) +
                           " parameters");
  auto it = f.metadata().find("step");
  if (it == f.metadata().end()) throw SafetensorsError(file.string() + ": metadata has no 'step'");
  // At most 2^53: every step count a run reaches, and one the next step_++ cannot overflow (a
  // step of INT64_MAX resumed quietly, and its next update made every weight NaN).
  constexpr int64_t kMaxStep = int64_t(1) << 53;
  int64_t step = 0;
  try {
    size_t used = 0;
    step = std::stoll(it->second, &used);
    if (used != it->second.size() || step < 0 || step > kMaxStep) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw SafetensorsError(file.string() + ": metadata 'step' is not an integer in [0, 2^53]: '" + it->second + "'");
  }
  std::vector<float> host(m_.size());
  for (auto [from, to] : {std::pair{&m, &m_}, std::pair{&v, &v_}}) {
    to_f32(*from, host);
    if (!file_order_.empty()) host = from_file_order(host, file_order_);
    to->upload(host.data(), host.size());
  }
  step_ = step;
}

}  // namespace azr::model
