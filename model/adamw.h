#pragma once
// AdamW with decoupled weight decay, exactly torch.optim.AdamW (the update order matters to
// match it to the last bit: decay, moments, bias-corrected step), and global grad-norm clipping
// as torch.nn.utils.clip_grad_norm_. The state (m, v, step) saves to and loads from a
// safetensors file next to the checkpoint, so a resumed run continues the same trajectory.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/ops.h"
#include "model/flat_range.h"

namespace azr::model {

class Transformer;

struct AdamWSettings {
  double lr = 1e-6;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// Scales grads in place so their global L2 norm is at most max_norm (coefficient
// max_norm / (norm + 1e-6), applied only when below 1). Returns the norm before clipping.
double clip_grad_norm(const kernels::Ops& ops, std::span<float> grads, double max_norm);

// The same clip, measured but not applied: the norm, and the coefficient clip_grad_norm would
// scale by (1 where it would not). AdamW::step takes the coefficient and reads each gradient times
// it, the values clip_grad_norm would have stored, without a pass that reads and writes them all.
struct GradClip {
  double norm = 0;
  float scale = 1.f;
};
GradClip measure_grad_clip(const kernels::Ops& ops, std::span<const float> grads, double max_norm);

class AdamW {
 public:
  AdamW(const kernels::Ops& ops, size_t num_params, AdamWSettings settings = {});

  // One update of params by grads * grad_scale (same flat layout; grad_scale: measure_grad_clip's).
  // Increments step() first, as torch does.
  void step(std::span<float> params, std::span<const float> grads, float grad_scale = 1.f);
  // The same update of model's parameters; where the table has adamw_w16, it also writes the
  // model's bf16 copy of them in the same pass (Transformer::weights16_for_writing).
  void step(Transformer& model, std::span<const float> grads, float grad_scale = 1.f);

  int64_t step_count() const { return step_; }
  const AdamWSettings& settings() const { return settings_; }
  void set_lr(double lr) { settings_.lr = lr; }
  // The moments, in the memory of the backend (as the model's parameters).
  std::span<const float> m() const { return m_.span(); }
  std::span<const float> v() const { return v_.span(); }

  // optimizer.safetensors: tensors "exp_avg" and "exp_avg_sq" (flat) and metadata {step, lr,
  // betas, eps, weight_decay}. load() checks the size against the model's and throws
  // SafetensorsError / std::runtime_error naming the file otherwise. The flat values are in the
  // file's order: the buffers' own, or, after set_file_order (Transformer::file_order), the model's
  // tensors in expected_tensors()' order, whatever the buffers' layout (files written before
  // q/k/v and gate/up were stored adjacent have that order, and read the same).
  void save(const std::filesystem::path& file) const;
  void load(const std::filesystem::path& file);
  void set_file_order(std::vector<FlatRange> order);

 private:
  void check_sizes(std::span<const float> params, std::span<const float> grads) const;
  // The update (params16: the model's bf16 copy, written in the same pass where not null).
  void update(std::span<float> params, uint16_t* params16, std::span<const float> grads, float grad_scale);

  const kernels::Ops* ops_;
  AdamWSettings settings_;
  kernels::Buffer<float> m_, v_;
  int64_t step_ = 0;
  std::vector<FlatRange> file_order_;  // empty: the buffers' own order
};

}  // namespace azr::model
