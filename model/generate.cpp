#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace azr::model {
namespace {

// splitmix64: tiny, seedable, the same everywhere.
struct Rng {
  uint64_t state;
  double uniform() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return double(z >> 11) * 0x1.0p-53;  // [0, 1)
  }
};

void check_params(const SamplingParams& p, int64_t V) {
  if (!(p.temperature >= 0.f) || !std::isfinite(p.temperature))
    throw std::invalid_argument("temperature must be >= 0 (0 = greedy)");
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) throw std::invalid_argument("top_p must be in (0, 1]");
  if (p.top_k < 0) throw std::invalid_argument("top_k must be >= 0 (0 = off)");
  if (p.max_new_tokens < 0) throw std::invalid_argument("max_new_tokens must be >= 0");
  if (p.vocab_limit < 0 || p.vocab_limit > V)
    throw std::invalid_argument("vocab_limit must be in [0, " + std::to_string(V) + "]");
}

}  // namespace

SamplingParams sampling_defaults(const Transformer& model, const Tokenizer& tokenizer, bool stop_at_eos) {
  SamplingParams p;
  p.vocab_limit = std::min<int64_t>(int64_t(tokenizer.vocab_size()), model.config().vocab_size);
  if (stop_at_eos)
    for (int64_t id : model.config().eos_token_ids) p.stop_token_ids.push_back(int32_t(id));
  return p;
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Length: return "length";
    case FinishReason::StopToken: return "stop_token";
    case FinishReason::StopString: return "stop_string";
  }
  return "?";
}

int32_t sample_token(const float* logits, int64_t V, const SamplingParams& params, double u, float* logprob) {
  if (params.vocab_limit > 0) V = std::min(V, params.vocab_limit);
  const float* end = logits + V;
  // log-softmax at temperature t of the kept set `ids` (all of V when ids is empty).
  if (params.temperature == 0.f) {
    const int32_t best = int32_t(std::max_element(logits, end) - logits);
    double sum = 0;
    for (const float* z = logits; z < end; z++) sum += std::exp(double(*z) - logits[best]);
    *logprob = float(-std::log(sum));
    return best;
  }
  const double inv_t = 1.0 / params.temperature;
  double mx = -INFINITY;
  for (const float* z = logits; z < end; z++) mx = std::max(mx, *z * inv_t);
  std::vector<double> p(static_cast<size_t>(V));
  double total = 0;
  for (int64_t j = 0; j < V; j++) total += (p[j] = std::exp(logits[j] * inv_t - mx));

  const bool filter = (params.top_k > 0 && params.top_k < V) || params.top_p < 1.f;
  if (!filter) {
    double target = u * total, acc = 0;
    int64_t pick = V - 1;
    for (int64_t j = 0; j < V; j++) {
      acc += p[j];
      if (acc > target) {
        pick = j;
        break;
      }
    }
    while (p[pick] == 0.0 && pick > 0) pick--;  // never return a zero-probability token
    *logprob = float(std::log(p[pick] / total));
    return int32_t(pick);
  }
  // Candidates by descending probability (ties by id, so the order is deterministic).
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  auto by_prob = [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; };
  int64_t keep = V;
  if (params.top_k > 0 && params.top_k < V) {
    keep = params.top_k;
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_prob);
  } else {
    std::sort(ids.begin(), ids.end(), by_prob);
  }
  double kept_total = 0;
  for (int64_t i = 0; i < keep; i++) kept_total += p[ids[i]];
  if (params.top_p < 1.f) {
    // Keep a token while the probability mass before it (in the top-k renormalised
    // distribution) is below top_p: the smallest prefix reaching top_p, at least one token.
    double before = 0;
    int64_t n = 0;
    while (n < keep && (n == 0 || before < params.top_p * kept_total)) before += p[ids[n++]];
    keep = n;
    kept_total = before;
  }
  double target = u * kept_total, acc = 0;
  int64_t pick = keep - 1;
  for (int64_t i = 0; i < keep; i++) {
    acc += p[ids[i]];
    if (acc > target) {
      pick = i;
      break;
    }
  }
  *logprob = float(std::log(p[ids[pick]] / kept_total));
  return ids[pick];
}

std::vector<Completion> generate(Transformer& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const SamplingParams& params, const Tokenizer* tokenizer) {
  const int64_t V = model.config().vocab_size;
  check_params(params, V);
  if (!params.stop_strings.empty() && !tokenizer) throw std::invalid_argument("stop strings need a tokenizer");
  for (const std::string& s : params.stop_strings)
    if (s.empty()) throw std::invalid_argument("a stop string is empty");
  const SequenceBatch batch = SequenceBatch::from(prompts);
  const int64_t B = batch.B;
  std::vector<Completion> out(static_cast<size_t>(B));
  if (params.max_new_tokens == 0) return out;

  size_t longest_stop = 0;
  for (const std::string& s : params.stop_strings) longest_stop = std::max(longest_stop, s.size());
  std::vector<std::string> bytes(static_cast<size_t>(B));  // raw decoded bytes of each completion
  std::vector<Rng> rng;
  if (!params.sequence_seeds.empty() && int64_t(params.sequence_seeds.size()) != B)
    throw std::invalid_argument("sequence_seeds has " + std::to_string(params.sequence_seeds.size()) +
                                " entries for " + std::to_string(B) + " prompts");
  for (int64_t b = 0; b < B; b++)
    rng.push_back({params.sequence_seeds.empty()
                       ? params.seed * 0x9E3779B97F4A7C15ull + uint64_t(b) * 0xD1B54A32D192ED03ull
                       : params.sequence_seeds[size_t(b)] * 0x9E3779B97F4A7C15ull + 0xD1B54A32D192ED03ull});

  KVCache cache(model.config(), B, batch.T + params.max_new_tokens, model.ops());
  std::vector<float> logits = model.prefill(cache, batch);
  std::vector<int32_t> live(static_cast<size_t>(B));  // slots still generating, in the order of `logits` rows
  std::iota(live.begin(), live.end(), 0);
  std::vector<int32_t> tokens, slots, pos;
  for (int32_t step = 0; !live.empty(); step++) {
    tokens.clear(), slots.clear(), pos.clear();
    for (size_t r = 0; r < live.size(); r++) {
      const int32_t b = live[r];
      Completion& c = out[size_t(b)];
      float lp = 0;
      const int32_t tok = sample_token(&logits[r * V], V, params, rng[size_t(b)].uniform(), &lp);
      c.tokens.push_back(tok);
      c.logprobs.push_back(lp);
      bool done = false;
      if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), tok) != params.stop_token_ids.end()) {
        c.finish = FinishReason::StopToken;
        done = true;
      }
      if (tokenizer && !done) {  // the stop token itself is not part of the text
        std::string& text = bytes[size_t(b)];
        const size_t before = text.size();
        tokenizer->append_token_bytes(tok, text);
        if (longest_stop > 0) {
          // A match must end inside the new bytes; report the earliest one.
          const size_t from = before >= longest_stop - 1 ? before - (longest_stop - 1) : 0;
          size_t cut = std::string::npos;
          for (const std::string& s : params.stop_strings) cut = std::min(cut, text.find(s, from));
          if (cut != std::string::npos) {
            text.resize(cut);
            c.finish = FinishReason::StopString;
            done = true;
          }
        }
      }
      if (!done && int32_t(c.tokens.size()) >= params.max_new_tokens) done = true;  // FinishReason::Length
      if (!done) {
        tokens.push_back(tok);
        slots.push_back(b);
        pos.push_back(batch.lengths[b] + int32_t(c.tokens.size()) - 1);
      }
    }
    live = slots;
    if (live.empty()) break;
    model.decode(cache, tokens, slots, pos, logits);
  }
  if (tokenizer)
    for (int64_t b = 0; b < B; b++) out[b].text = utf8_lossy(bytes[size_t(b)]);
  return out;
}

}  // namespace azr::model
