#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "kernels/cpu/sampling.h"

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
  return kernels::sample_row(logits, V, params.temperature, params.top_k, params.top_p, u, logprob);
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

  // Sampling runs where the logits are (the op table's sample_rows): only each live row's uniform
  // draw goes over, and its token and log-prob come back.
  const kernels::Ops& ops = model.ops();
  const int64_t V_limit = params.vocab_limit > 0 ? params.vocab_limit : V;
  // A step's R tokens and R log-probs side by side (4 bytes each), so that one download brings
  // both back: on a GPU each download waits for the device, and a batch-1 step is about a
  // millisecond.
  kernels::Buffer<double> u_dev(ops, size_t(B));
  kernels::Buffer<uint32_t> sampled_dev(ops, size_t(2 * B));
  std::vector<double> u(static_cast<size_t>(B));
  std::vector<uint32_t> sampled_bits(static_cast<size_t>(2 * B));
  std::vector<int32_t> sampled(static_cast<size_t>(B));
  std::vector<float> sampled_lp(static_cast<size_t>(B));

  KVCache cache(model.config(), B, batch.T + params.max_new_tokens, ops);
  const float* logits = model.prefill_on_backend(cache, batch);
  std::vector<int32_t> live(static_cast<size_t>(B));  // slots still generating, in the order of `logits` rows
  std::iota(live.begin(), live.end(), 0);
  std::vector<int32_t> tokens, slots, pos;
  for (int32_t step = 0; !live.empty(); step++) {
    const size_t R = live.size();
    for (size_t r = 0; r < R; r++) u[r] = rng[size_t(live[r])].uniform();
    u_dev.upload(u.data(), R);
    ops.sample_rows(reinterpret_cast<int32_t*>(sampled_dev.data()), reinterpret_cast<float*>(sampled_dev.data() + R),
                    logits, u_dev.data(), int64_t(R), V, V_limit, params.temperature, params.top_k, params.top_p);
    sampled_dev.download(sampled_bits.data(), 2 * R);
    std::memcpy(sampled.data(), sampled_bits.data(), sizeof(int32_t) * R);
    std::memcpy(sampled_lp.data(), sampled_bits.data() + R, sizeof(float) * R);
    tokens.clear(), slots.clear(), pos.clear();
    for (size_t r = 0; r < R; r++) {
      const int32_t b = live[r];
      Completion& c = out[size_t(b)];
      const float lp = sampled_lp[r];
      const int32_t tok = sampled[r];
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
    logits = model.decode_on_backend(cache, tokens, slots, pos);
  }
  if (tokenizer)
    for (int64_t b = 0; b < B; b++) out[b].text = utf8_lossy(bytes[size_t(b)]);
  return out;
}

}  // namespace azr::model
