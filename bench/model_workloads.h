#pragma once
// The model workloads the benchmarks time, shared so that transformer_bench (the CPU against
// eager PyTorch) and model_speed_bench (any device against Hugging Face transformers) measure the
// same work:
//   train:    random ids [B, T]; one step = zero_grad -> score(batch, 1, true) ->
//             cross_entropy_loss (mask t >= 1: token-mean over B*(T-1)) -> backward ->
//             clip_grad_norm(1.0) -> AdamW.step. Phases are timed on the same steps. With K
//             micro-batches, a step is K of score -> loss (scaled by 1/K) -> backward, each on its
//             own random [B, T] ids, with the gradients accumulating, and then one clip and AdamW
//             step: how an RL step trains (algorithm.micro_batch_size sequences at a time, one
//             update per batch), where the update's fixed cost is shared by K micro-batches.
//   generate: G prompts of P random tokens, N new tokens each at temperature 1, no stop tokens
//             (every sequence runs N tokens), prefill included.
// The op table has no barrier, so the timers end each phase with a one-float download, which
// waits for every queued op on any backend (a no-op's cost on the CPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "model/adamw.h"
#include "model/generate.h"
#include "model/losses.h"
#include "model/transformer.h"

namespace azr::bench {

// Waits until the model's backend has finished every op queued so far. It reads the weights
// through the const model: the mutable parameters() counts as a write, after which a bf16 table
// rounds every weight again before its next product (twice a training step when this timed its
// phases: 2 x 3.9 ms of a 1.5B step on an H100, 2026-11-26).
inline void backend_barrier(const model::Transformer& m) {
  float x = 0;
  m.ops().download(&x, m.parameters().data(), sizeof x);
}

inline model::SequenceBatch random_batch(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  model::SequenceBatch batch;
  batch.B = B;
  batch.T = T;
  batch.ids.resize(size_t(B * T));
  for (auto& id : batch.ids) id = tok(rng);
  batch.lengths.assign(size_t(B), int32_t(T));
  return batch;
}

struct TrainResult {
  double tokens_per_s = 0, seconds = 0, loss = 0;
  std::map<std::string, double> phase_ms;  // per step
};

inline TrainResult train_steps(model::Transformer& m, model::AdamW& opt, int64_t B, int64_t T, int warmup,
                               int steps, int micro_batches = 1) {
  std::vector<model::SequenceBatch> batches;
  for (int k = 0; k < micro_batches; ++k) batches.push_back(random_batch(B, T, m.config().vocab_size, uint64_t(k)));
  std::vector<float> mask(size_t(B * T), 0.f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 1; t < T; ++t) mask[size_t(b * T + t)] = 1.f;

  TrainResult r;
  const char* names[] = {"zero_grad", "forward", "loss", "backward", "clip", "adamw"};
  double acc[6] = {0, 0, 0, 0, 0, 0};
  auto step = [&](bool timed) {
    double ph[6] = {0, 0, 0, 0, 0, 0};
    auto t = Clock::now();
    auto lap = [&](int i) {  // a phase's time, summed over the micro-batches
      backend_barrier(m);
      const auto now = Clock::now();
      ph[i] += std::chrono::duration<double>(now - t).count();
      t = now;
    };
    m.zero_grad();
    lap(0);
    double loss_sum = 0;
    for (const model::SequenceBatch& batch : batches) {
      model::TokenScores s = m.score(batch, 1.f, true);
      lap(1);
      model::LossResult loss = model::cross_entropy_loss(s, mask);
      if (micro_batches > 1)  // the mean over the step's micro-batches
        for (float& g : loss.dlogp) g /= float(micro_batches);
      loss_sum += loss.loss;
      lap(2);
      m.backward(loss.dlogp, loss.dentropy);
      lap(3);
    }
    auto grads = m.gradients();
    const model::GradClip clip = model::measure_grad_clip(m.ops(), grads, 1.0);  // applied inside the step
    lap(4);
    opt.step(m, grads, clip.scale);
    lap(5);
    if (timed)
      for (int i = 0; i < 6; ++i) acc[i] += ph[i];
    r.loss = loss_sum / micro_batches;
  };
  for (int i = 0; i < warmup; ++i) step(false);
  backend_barrier(m);
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step(true);
  backend_barrier(m);
  r.seconds = secs_since(t0);
  r.tokens_per_s = double(B * T * micro_batches * steps) / r.seconds;
  for (int i = 0; i < 6; ++i) r.phase_ms[names[i]] = 1e3 * acc[i] / steps;
  return r;
}

inline std::vector<std::vector<int32_t>> random_prompts(int64_t G, int64_t P, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(V - 1));
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(G), std::vector<int32_t>(static_cast<size_t>(P)));
  for (auto& p : prompts)
    for (auto& id : p) id = tok(rng);
  return prompts;
}

// Seconds for one generate() of N new tokens per prompt (after a short untimed warm-up when
// `warm_up`); complains on stderr if a sequence stopped early. launch_ahead: SamplingParams'.
inline double timed_generate(model::Transformer& m, const std::vector<std::vector<int32_t>>& prompts, int64_t N,
                             bool warm_up = true, bool launch_ahead = true) {
  model::SamplingParams sp;
  sp.temperature = 1.f;
  sp.launch_ahead = launch_ahead;
  if (warm_up) {
    sp.max_new_tokens = int32_t(std::min<int64_t>(N, 8));
    model::generate(m, prompts, sp);
  }
  sp.max_new_tokens = int32_t(N);
  sp.seed = 7;
  backend_barrier(m);
  const auto t0 = Clock::now();
  const auto out = model::generate(m, prompts, sp);
  const double sec = secs_since(t0);  // generate() ends with a download: nothing is left queued
  size_t produced = 0;
  for (const auto& c : out) produced += c.tokens.size();
  if (produced != prompts.size() * size_t(N))
    std::fprintf(stderr, "bench: generated %zu tokens, expected %zu\n", produced, prompts.size() * size_t(N));
  return sec;
}

}  // namespace azr::bench
