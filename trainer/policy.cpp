#include "trainer/policy.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace azr::trainer {

Policy::Policy(model::Transformer model, std::unique_ptr<model::Tokenizer> tokenizer, model::AdamWSettings adamw)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      optimizer_(model_.ops(), model_.parameters().size(), adamw) {
  // The optimizer's file keeps the tensors in checkpoint order, whatever the buffers' layout.
  optimizer_.set_file_order(model_.file_order());
}

std::vector<model::Completion> Policy::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                const std::vector<uint64_t>& seeds, model::SamplingParams params,
                                                int batch) {
  if (seeds.size() != prompts.size()) throw std::invalid_argument("Policy::generate: one seed per prompt");
  std::vector<model::Completion> out;
  out.reserve(prompts.size());
  const size_t step = size_t(std::max(1, batch));
  for (size_t begin = 0; begin < prompts.size(); begin += step) {
    const size_t end = std::min(prompts.size(), begin + step);
    std::vector<std::vector<int32_t>> chunk(prompts.begin() + long(begin), prompts.begin() + long(end));
    params.sequence_seeds.assign(seeds.begin() + long(begin), seeds.begin() + long(end));
    for (model::Completion& c : model::generate(model_, chunk, params, tokenizer_.get())) out.push_back(std::move(c));
    prefill_totals_ += model_.prefill_stats();
  }
  return out;
}

// The communicators sum host memory. A backend whose memory the host cannot read (a GPU) sends
// its gradients through a host copy, one download and one upload of the gradient per step,
// unless it was given a DeviceReducer (NCCL), which sums them where they are.
void Policy::allreduce_gradients(std::span<float> grads, dist::Communicator& comm) {
  if (comm.size() == 1) return;
  const kernels::Ops& ops = model_.ops();
  if (ops.host_memory) {
    comm.allreduce_sum(grads);
    return;
  }
  if (device_reducer_) {
    device_reducer_->allreduce_sum(grads);
    return;
  }
  host_grads_.resize(grads.size());
  ops.download(host_grads_.data(), grads.data(), grads.size_bytes());
  comm.allreduce_sum(std::span<float>(host_grads_));
  ops.upload(grads.data(), host_grads_.data(), grads.size_bytes());
}

UpdateStats Policy::update(const std::vector<TrainSequence>& seqs, double global_tokens, dist::Communicator& comm,
                           const UpdateSettings& s) {
  UpdateStats st;
  // A step with nothing to learn from (every result lost, every prompt too long) leaves the
  // weights as they are: AdamW would still move them, by weight decay and by the momentum of the
  // steps before, about a whole step in their direction. global_tokens is the same count on every
  // rank, so all ranks skip together.
  if (global_tokens <= 0) return st;
  model_.zero_grad();
  // loss, pg_loss, entropy, clip_fraction, approx_kl, tokens: summed over micro-batches and ranks
  std::vector<double> sums(6, 0.0);
  const size_t mb = size_t(std::max(1, s.micro_batch_size));
  for (size_t begin = 0; begin < seqs.size(); begin += mb) {
    const size_t end = std::min(seqs.size(), begin + mb);
    std::vector<std::vector<int32_t>> full;
    for (size_t i = begin; i < end; i++) {
      std::vector<int32_t> ids = seqs[i].prompt;
      ids.insert(ids.end(), seqs[i].response.begin(), seqs[i].response.end());
      full.push_back(std::move(ids));
    }
    const model::SequenceBatch batch = model::SequenceBatch::from(full);
    const size_t N = size_t(batch.B * batch.T);
    std::vector<float> old_logp(N, 0.f), adv(N, 0.f), mask(N, 0.f);
    for (size_t i = begin; i < end; i++) {
      const size_t b = i - begin, plen = seqs[i].prompt.size();
      for (size_t r = 0; r < seqs[i].response.size(); r++) {
        const size_t idx = b * size_t(batch.T) + plen + r;
        old_logp[idx] = seqs[i].old_logp[r];
        adv[idx] = seqs[i].advantage;
        mask[idx] = 1.f;
      }
      st.processed_tokens += double(full[b].size());
    }
    const model::TokenScores scores = model_.score(batch, s.temperature, true);
    if (s.old_logp_from_learner)
      for (size_t i = 0; i < N; i++)
        if (mask[i] != 0.f) old_logp[i] = scores.logp[i];
    const model::LossResult r = model::ppo_clip_loss(scores, old_logp, adv, mask, s.ppo, global_tokens);
    model_.backward(r.dlogp, r.dentropy);
    sums[0] += r.loss, sums[1] += r.pg_loss, sums[2] += r.entropy, sums[3] += r.clip_fraction, sums[4] += r.approx_kl;
    sums[5] += r.tokens;
  }
  // After the backward passes: the first of them writes the weight gradients (zero_grad), and
  // gradients() fills them only where none ran.
  const std::span<float> grads = model_.gradients();
  allreduce_gradients(grads, comm);
  comm.allreduce_sum(std::span<double>(sums));
  st.loss = sums[0], st.pg_loss = sums[1], st.entropy = sums[2], st.clip_fraction = sums[3], st.approx_kl = sums[4];
  st.tokens = sums[5];
  // An infinite bound only measures; the clip's coefficient goes into the update, not the gradients.
  const model::GradClip clip = model::measure_grad_clip(model_.ops(), grads, s.grad_clip > 0 ? s.grad_clip : 1e300);
  st.grad_norm = clip.norm;
  // The norm is the all-reduced gradient's, the same on every rank, so all skip together. A step
  // on it would write NaN into every weight and every moment, for good.
  st.skipped_not_finite = !std::isfinite(clip.norm);
  if (!st.skipped_not_finite) optimizer_.step(model_, grads, clip.scale);
  model_.release_training_buffers();  // before the next generation's KV cache (memory_plan.h)
  return st;
}

}  // namespace azr::trainer
