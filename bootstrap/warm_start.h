#pragma once
// The warm start: supervised next-token training of a new (tiny) model on task transcripts
// (bootstrap/transcripts.h), so it writes the task engine's formats before self-play starts.
//
// Each transcript becomes one sequence encode(prompt) + encode(response) + [eos]. The loss is the
// token-mean cross entropy over the response tokens and the eos (the prompt is context only and
// never counted), normalised by the masked token count of the WHOLE batch, so micro-batching
// changes nothing but memory. Batches are drawn from `data` in epochs of a seeded shuffle.
// AdamW (model/adamw.h, betas 0.9/0.999) with global grad-norm clipping; the learning rate warms
// up linearly over ceil(warmup_fraction * steps) steps, then decays by a cosine to 10% of `lr`
// at the last step.
#include <cstdint>
#include <functional>
#include <vector>

#include "bootstrap/transcripts.h"
#include "model/tokenizer.h"
#include "model/transformer.h"

namespace azr::bootstrap {

struct WarmStartSettings {
  int steps = 200;
  int batch_size = 8;        // sequences per optimizer step
  int micro_batch_size = 8;  // sequences per forward/backward (gradients accumulate)
  double lr = 1e-3;
  double weight_decay = 0.0;
  double warmup_fraction = 0.05;
  double grad_clip = 1.0;  // <= 0: no clipping
  uint64_t seed = 0;
};

struct WarmStartStats {
  std::vector<double> loss;     // per step: mean -logp over the step's response (+eos) tokens
  std::vector<double> lr;       // per step: the learning rate used
  std::vector<double> grad_norm;  // per step: the norm before clipping
  double tokens_per_s = 0;      // processed_tokens / wall seconds of the training loop
  int64_t trained_tokens = 0;   // response + eos tokens the loss was taken over (all steps)
  int64_t processed_tokens = 0; // every real token run forward and backward (prompts included)
};

// The learning rate of step `step` (0-based) of `s.steps`.
double warm_start_lr(const WarmStartSettings& s, int step);

// Trains `m` in place. `progress` (if set) is called after each step. Throws
// std::invalid_argument on empty data, non-positive batch sizes, an eos outside the model's
// vocabulary, or a sequence longer than the model's max_position_embeddings.
WarmStartStats warm_start(model::Transformer& m, const model::Tokenizer& tok, const std::vector<Transcript>& data,
                          int32_t eos, const WarmStartSettings& s,
                          const std::function<void(int step, double loss)>& progress = {});

// The sequence and loss mask of one transcript, exactly as warm_start() builds them:
// ids = encode(prompt) + encode(response) + [eos]; mask[t] = 1 where ids[t] is a response token
// or the eos (index t in the "position t scores token t" convention of TokenScores).
struct EncodedTranscript {
  std::vector<int32_t> ids;
  std::vector<float> mask;
  int64_t prompt_tokens = 0;
};
EncodedTranscript encode_transcript(const model::Tokenizer& tok, const Transcript& t, int32_t eos);

}  // namespace azr::bootstrap
