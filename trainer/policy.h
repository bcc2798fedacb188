#pragma once
// The policy: one model that generates (both roles) and learns, its tokenizer and its optimizer.
// Generation and training share the same weights and kernels, so the log-probs the sampler
// reports are the "old" log-probs of the PPO ratio: no second forward pass before the update,
// and no sampler/learner mismatch (the reference recomputes them with a second engine) but the
// padded LM-head rows' mass, which the sampler (vocab_limit: the tokenizer's ids) leaves out and
// the learner's softmax holds. With top-p or top-k sampling the sampler's log-probs are of the
// truncated distribution, and the learner's own replace them (UpdateSettings::old_logp_from_learner).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/generate.h"
#include "model/losses.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "trainer/dist.h"

namespace azr::trainer {

// One response to learn from: the prompt, what was sampled, the sampler's log-prob of each
// sampled token and the sequence's advantage (the same on every token, TRR++).
struct TrainSequence {
  std::vector<int32_t> prompt;
  std::vector<int32_t> response;
  std::vector<float> old_logp;  // one per response token
  float advantage = 0;
};

struct UpdateSettings {
  model::PpoSettings ppo;
  float temperature = 1.f;    // the sampling temperature (log-probs are taken at it, as veRL does)
  int micro_batch_size = 8;   // sequences per forward/backward
  double grad_clip = 1.0;     // 0 = off
  // The ratio's old log-probs are the learner's own (detached) instead of the sampler's. For a
  // sampler that drew from a truncated distribution (top_p < 1 or top_k > 0): its log-probs are of
  // that distribution, not the policy's softmax, and would start every ratio below 1. veRL
  // recomputes them with the actor; here the update is one optimizer step on the weights that
  // sampled, so the recomputation is this forward's: the ratio is 1 and the clipped loss is the
  // plain policy gradient, as the first mini-batch of veRL's is.
  bool old_logp_from_learner = false;
};

// Global diagnostics of one update (token means over every rank's response tokens).
struct UpdateStats {
  double loss = 0, pg_loss = 0, entropy = 0, clip_fraction = 0, approx_kl = 0;
  double grad_norm = 0;       // before clipping
  // The gradient held a NaN or an infinity (an overflow in the loss, weights already broken): the
  // optimizer did not step, so the weights and its state are as they were.
  bool skipped_not_finite = false;
  double tokens = 0;          // response tokens, all ranks
  double processed_tokens = 0;  // prompt + response tokens run through forward/backward, this rank
};

class Policy {
 public:
  Policy(model::Transformer model, std::unique_ptr<model::Tokenizer> tokenizer, model::AdamWSettings adamw);

  model::Transformer& model() { return model_; }
  const model::Tokenizer& tokenizer() const { return *tokenizer_; }
  model::AdamW& optimizer() { return optimizer_; }

  std::vector<int32_t> encode(const std::string& text) const { return tokenizer_->encode(text); }

  // Samples one completion per prompt, `batch` prompts per generate() call, prompt i with
  // seeds[i]. `params.sequence_seeds` is set here.
  std::vector<model::Completion> generate(const std::vector<std::vector<int32_t>>& prompts,
                                          const std::vector<uint64_t>& seeds, model::SamplingParams params,
                                          int batch);
  // The prefills of every generate() so far, summed: prompt tokens, and those the layers ran on
  // (identical prompts within one generate() call are computed once: model::PrefillStats).
  const model::PrefillStats& prefill_totals() const { return prefill_totals_; }

  // One optimizer step: PPO-clip loss over this rank's sequences, normalised by the response
  // tokens of the whole global batch (`global_tokens`), so the accumulated gradient is the
  // global token mean whatever the micro-batching or the number of ranks; gradients are summed
  // over ranks, clipped by global norm, and AdamW updates the weights identically everywhere.
  UpdateStats update(const std::vector<TrainSequence>& seqs, double global_tokens, dist::Communicator& comm,
                     const UpdateSettings& settings);

  // Sums the gradients of a model on a GPU with `reducer` (NCCL) instead of through the host
  // communicator's host copy; nullptr goes back to the host copy.
  void set_device_reducer(std::unique_ptr<dist::DeviceReducer> reducer) { device_reducer_ = std::move(reducer); }

 private:
  void allreduce_gradients(std::span<float> grads, dist::Communicator& comm);

  model::Transformer model_;
  std::unique_ptr<model::Tokenizer> tokenizer_;
  model::AdamW optimizer_;
  std::vector<float> host_grads_;  // the all-reduce's host copy, for backends without host memory
  std::unique_ptr<dist::DeviceReducer> device_reducer_;  // or no copy: NCCL on the GPU
  model::PrefillStats prefill_totals_;
};

}  // namespace azr::trainer
