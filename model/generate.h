#pragma once
// Batched sampling with a KV cache: prefill every distinct prompt once (copies of a prompt, such as
// a task's learnability rollouts, share its computation: Transformer::prefill_stats), then one
// decode step per new token for the sequences still running (finished ones drop out of the batch,
// so the step's GEMMs only carry live rows).
//
// Sampling order is transformers' and vLLM's: temperature, then top-k, then top-p (the smallest
// set of most likely tokens whose probability reaches top_p), renormalised. The log-prob
// returned for each token is under that distribution, which is what the sampler actually drew
// from; with top_k = 0 and top_p = 1 it equals Transformer::score() at the same temperature, so
// the trainer's old log-probs and the sampler's agree. Greedy decoding (temperature 0) reports
// log-probs at temperature 1. One difference: top-k keeps exactly k tokens, ties at the k-th
// probability broken by the lower id, where transformers and vLLM keep every token tied with the
// k-th (so they may keep more than k). Exact ties are rare in a real model's logits, and the CPU
// and CUDA samplers agree on this rule.
//
// Randomness is per sequence (seed, sequence index), so a sequence's sample does not depend on
// which other sequences share its batch. The host draws each row's uniform; the op table's
// sample_rows samples where the logits are, so a GPU returns tokens, not logits.
#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizer.h"
#include "model/transformer.h"

namespace azr::model {

struct SamplingParams {
  float temperature = 1.f;  // 0 = greedy
  float top_p = 1.f;        // (0, 1]
  int32_t top_k = 0;        // 0 = off
  int32_t max_new_tokens = 256;
  std::vector<int32_t> stop_token_ids;    // the stop token is kept as the last token
  std::vector<std::string> stop_strings;  // needs a tokenizer; the text is cut before the match
  uint64_t seed = 0;
  // One seed per prompt, replacing (seed, index): a caller that splits one logical batch over
  // several calls or ranks gives each sequence its global seed, so its sample does not depend
  // on the split.
  std::vector<uint64_t> sequence_seeds;
  int64_t vocab_limit = 0;  // sample only ids below this (a tokenizer's size); 0 = every row
  // Launch decode step t+1 from step t's sampled tokens where they are, before the host reads them
  // (its stop checks then overlap the device's step; model/generate.cpp). The samples are the same
  // either way; false runs one step at a time (the baseline bench/model_speed_bench times it against).
  bool launch_ahead = true;
};

enum class FinishReason { Length, StopToken, StopString };
const char* finish_reason_name(FinishReason r);  // "length", "stop_token", "stop_string"

struct Completion {
  std::vector<int32_t> tokens;  // the new tokens
  std::vector<float> logprobs;  // one per new token
  FinishReason finish = FinishReason::Length;
  std::string text;             // decoded new tokens (with a tokenizer), cut before a stop string
};

// The settings every caller needs for a given model and tokenizer: sample only ids the tokenizer
// has (embedding rows past it are padding) and, with stop_at_eos, stop at the config's
// eos_token_ids and generation_config.json's. The rest stays at SamplingParams' defaults.
SamplingParams sampling_defaults(const Transformer& model, const Tokenizer& tokenizer, bool stop_at_eos = true);

// Throws std::invalid_argument on bad parameters, an empty prompt, or stop strings without a
// tokenizer.
std::vector<Completion> generate(Transformer& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const SamplingParams& params, const Tokenizer* tokenizer = nullptr);

// One sampling decision on a row of logits (exposed for tests): returns the token and writes its
// log-prob. `u` is a uniform draw in [0, 1). The same code as the op table's sample_rows on the
// CPU backend (kernels/cpu/sampling.h), which samples every row of a batch where the logits are.
int32_t sample_token(const float* logits, int64_t V, const SamplingParams& params, double u, float* logprob);

}  // namespace azr::model
