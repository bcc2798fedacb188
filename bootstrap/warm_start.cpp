#include "bootstrap/warm_start.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "buffer/seeded_random.h"
#include "model/adamw.h"
#include "model/losses.h"

namespace azr::bootstrap {

EncodedTranscript encode_transcript(const model::Tokenizer& tok, const Transcript& t, int32_t eos) {
  EncodedTranscript e;
  e.ids = tok.encode(t.prompt);
  e.prompt_tokens = static_cast<int64_t>(e.ids.size());
  std::vector<int32_t> r = tok.encode(t.response);
  e.ids.insert(e.ids.end(), r.begin(), r.end());
  e.ids.push_back(eos);
  e.mask.assign(e.ids.size(), 0.f);
  // Position 0 has no prediction (logp is 0 there), so with an empty prompt the first response
  // token is context only.
  for (size_t i = std::max<size_t>(1, static_cast<size_t>(e.prompt_tokens)); i < e.ids.size(); i++) e.mask[i] = 1.f;
  return e;
}

double warm_start_lr(const WarmStartSettings& s, int step) {
  const int warmup = static_cast<int>(std::ceil(std::max(0.0, s.warmup_fraction) * s.steps));
  if (step < warmup) return s.lr * static_cast<double>(step + 1) / warmup;
  const int decay_steps = s.steps - warmup - 1;
  const double progress = decay_steps > 0 ? std::min(1.0, static_cast<double>(step - warmup) / decay_steps) : 1.0;
  const double min_lr = 0.1 * s.lr;
  return min_lr + (s.lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

WarmStartStats warm_start(model::Transformer& m, const model::Tokenizer& tok, const std::vector<Transcript>& data,
                          int32_t eos, const WarmStartSettings& s,
                          const std::function<void(int step, double loss)>& progress) {
  if (data.empty()) throw std::invalid_argument("warm_start: no transcripts");
  if (s.batch_size <= 0 || s.micro_batch_size <= 0)
    throw std::invalid_argument("warm_start: batch_size and micro_batch_size must be positive");
  if (s.steps < 0) throw std::invalid_argument("warm_start: steps must be >= 0");
  const model::ModelConfig& c = m.config();
  if (eos < 0 || eos >= c.vocab_size)
    throw std::invalid_argument("warm_start: eos id " + std::to_string(eos) + " outside the vocabulary");

  std::vector<EncodedTranscript> enc;
  enc.reserve(data.size());
  for (size_t i = 0; i < data.size(); i++) {
    enc.push_back(encode_transcript(tok, data[i], eos));
    if (c.max_position_embeddings > 0 && static_cast<int64_t>(enc.back().ids.size()) > c.max_position_embeddings)
      throw std::invalid_argument("warm_start: transcript " + std::to_string(i) + " has " +
                                  std::to_string(enc.back().ids.size()) + " tokens, over max_position_embeddings " +
                                  std::to_string(c.max_position_embeddings));
  }

  WarmStartStats st;
  model::AdamWSettings as;
  as.lr = s.lr;
  as.weight_decay = s.weight_decay;
  std::span<float> grads = m.gradients();
  model::AdamW opt(m.ops(), grads.size(), as);

  std::mt19937_64 rng(s.seed);
  std::vector<size_t> order(enc.size());
  std::iota(order.begin(), order.end(), size_t{0});
  size_t cursor = order.size();  // forces a shuffle before the first draw

  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < s.steps; step++) {
    // Draw the batch: epochs over a seeded shuffle.
    std::vector<size_t> batch;
    batch.reserve(static_cast<size_t>(s.batch_size));
    for (int i = 0; i < s.batch_size; i++) {
      if (cursor == order.size()) {
        buffer::seeded_shuffle(order.begin(), order.end(), rng);
        cursor = 0;
      }
      batch.push_back(order[cursor++]);
    }
    // Micro-batches of similar length waste less on padding; the loss does not depend on the split.
    std::stable_sort(batch.begin(), batch.end(),
                     [&](size_t a, size_t b) { return enc[a].ids.size() < enc[b].ids.size(); });
    double normalizer = 0;
    for (size_t i : batch) normalizer += std::accumulate(enc[i].mask.begin(), enc[i].mask.end(), 0.0);

    m.zero_grad();
    double loss = 0;
    for (size_t lo = 0; lo < batch.size(); lo += static_cast<size_t>(s.micro_batch_size)) {
      const size_t hi = std::min(batch.size(), lo + static_cast<size_t>(s.micro_batch_size));
      std::vector<std::vector<int32_t>> seqs;
      for (size_t k = lo; k < hi; k++) seqs.push_back(enc[batch[k]].ids);
      model::SequenceBatch sb = model::SequenceBatch::from(seqs, eos);
      std::vector<float> mask(static_cast<size_t>(sb.B * sb.T), 0.f);
      for (size_t k = lo; k < hi; k++) {
        const std::vector<float>& mk = enc[batch[k]].mask;
        std::copy(mk.begin(), mk.end(), mask.begin() + static_cast<std::ptrdiff_t>((k - lo) * sb.T));
        st.processed_tokens += static_cast<int64_t>(mk.size());
      }
      model::TokenScores sc = m.score(sb, 1.f, true);
      model::LossResult lr = model::cross_entropy_loss(sc, mask, normalizer);
      m.backward(lr.dlogp, {});
      loss += lr.loss;
    }
    st.trained_tokens += static_cast<int64_t>(normalizer);
    grads = m.gradients();
    const model::GradClip clip = model::measure_grad_clip(
        m.ops(), grads, s.grad_clip > 0 ? s.grad_clip : std::numeric_limits<double>::infinity());
    const double gn = clip.norm;
    const double lr = warm_start_lr(s, step);
    opt.set_lr(lr);
    opt.step(m, grads, clip.scale);
    st.loss.push_back(loss);
    st.lr.push_back(lr);
    st.grad_norm.push_back(gn);
    if (progress) progress(step, loss);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.tokens_per_s = secs > 0 ? static_cast<double>(st.processed_tokens) / secs : 0;
  return st;
}

}  // namespace azr::bootstrap
