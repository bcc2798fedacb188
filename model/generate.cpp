#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "kernels/cpu/sampling.h"

namespace azr::model {
namespace {

// splitmix64's finaliser: a seed mixed by it starts a stream unrelated to the next seed's.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

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

// Tickets of started downloads (Ops::download_start), one a buffer, 0 when none is outstanding.
struct StartedDownloads {
  explicit StartedDownloads(const kernels::Ops& ops) : ops(ops) {}
  ~StartedDownloads() {
    for (int64_t& t : ticket) try {
        if (t) ops.download_wait(std::exchange(t, 0));
      } catch (...) {  // already unwinding, or the device failed: nothing to deliver into then
      }
  }
  StartedDownloads(const StartedDownloads&) = delete;
  StartedDownloads& operator=(const StartedDownloads&) = delete;
  void wait(int which) { ops.download_wait(std::exchange(ticket[which], 0)); }

  const kernels::Ops& ops;
  int64_t ticket[2] = {0, 0};
};

}  // namespace

SamplingParams sampling_defaults(const Transformer& model, const Tokenizer& tokenizer, bool stop_at_eos) {
  SamplingParams p;
  p.vocab_limit = std::min<int64_t>(int64_t(tokenizer.vocab_size()), model.config().vocab_size);
  if (stop_at_eos) {
    // Both files' ids: generate() in transformers stops at generation_config.json's, and a model
    // saved without one stops at config.json's.
    const ModelConfig& c = model.config();
    for (const std::vector<int64_t>* ids : {&c.eos_token_ids, &c.generation_eos_token_ids})
      for (int64_t id : *ids)
        if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), int32_t(id)) == p.stop_token_ids.end())
          p.stop_token_ids.push_back(int32_t(id));
  }
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
  // Each stream's state is a mixed seed: a state of seed * gamma, as it was, made seed s + 1 the
  // stream of seed s one draw later (the state advances by gamma a draw), so `azr generate
  // --seed 1` replayed --seed 0 shifted, and an evaluation's sample 16 (seed + 16) its sample 0.
  for (int64_t b = 0; b < B; b++)
    rng.push_back({params.sequence_seeds.empty()
                       ? mix64(mix64(params.seed) ^ mix64(uint64_t(b) + 0xD1B54A32D192ED03ull))
                       : mix64(params.sequence_seeds[size_t(b)] ^ 0xD1B54A32D192ED03ull)});

  // Sampling runs where the logits are (the op table's sample_rows): only each live row's uniform
  // draw goes over, and its token and log-prob come back, side by side (4 bytes each) so that one
  // download brings both. Two such buffers, a step's and the next one's (launch_ahead below).
  const kernels::Ops& ops = model.ops();
  const int64_t V_limit = params.vocab_limit > 0 ? params.vocab_limit : V;
  kernels::Buffer<double> u_dev(ops, size_t(B));
  std::vector<double> u(static_cast<size_t>(B));
  kernels::Buffer<uint32_t> sampled_dev[2] = {kernels::Buffer<uint32_t>(ops, size_t(2 * B)),
                                              kernels::Buffer<uint32_t>(ops, size_t(2 * B))};
  std::vector<uint32_t> sampled_host[2] = {std::vector<uint32_t>(size_t(2 * B)), std::vector<uint32_t>(size_t(2 * B))};
  // The cache before the downloads: on the way out of an exception their waits (the later one
  // queued after the step run ahead) then come before the cache is freed under that step.
  KVCache cache(model.config(), B, batch.T + params.max_new_tokens, ops);
  // The downloads started and not yet waited for, one a buffer: waited for on the way out too, as
  // a GPU would otherwise deliver them into sampled_host after an exception had freed it.
  StartedDownloads started(ops);
  // Draws the uniforms of a step's rows (slots, in the order of its logits' rows) and queues their
  // upload, before the step that makes the logits is launched: on a GPU the copy then runs ahead of
  // the recorded step, not between its last kernel and the sampler's first. The sampler before
  // has read u_dev by then (the op stream's order).
  const auto upload_uniforms = [&](const std::vector<int32_t>& rows) {
    for (size_t r = 0; r < rows.size(); r++) u[r] = rng[size_t(rows[r])].uniform();
    u_dev.upload(u.data(), rows.size());
  };
  // Samples the step's R rows with the uniforms upload_uniforms queued into sampled_dev[which] and
  // starts their download, to wait for (started.wait(which)) before reading sampled_host[which].
  const auto start_sampling = [&](const float* logits, size_t R, int which) {
    uint32_t* sampled = sampled_dev[which].data();
    ops.sample_rows(reinterpret_cast<int32_t*>(sampled), reinterpret_cast<float*>(sampled + R), logits, u_dev.data(),
                    int64_t(R), V, V_limit, params.temperature, params.top_k, params.top_p);
    started.ticket[which] = ops.download_start(sampled_host[which].data(), sampled, sizeof(uint32_t) * 2 * R);
  };

  // Appends slot b's sampled token to its completion; true when that finished it.
  const auto append = [&](int32_t b, int32_t tok, float lp) {
    Completion& c = out[size_t(b)];
    c.tokens.push_back(tok);
    c.logprobs.push_back(lp);
    if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), tok) != params.stop_token_ids.end()) {
      c.finish = FinishReason::StopToken;
      return true;
    }
    if (tokenizer) {  // the stop token itself is not part of the text
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
          return true;
        }
      }
    }
    return int32_t(c.tokens.size()) >= params.max_new_tokens;  // FinishReason::Length
  };

  std::vector<int32_t> rows(static_cast<size_t>(B));  // the slots sampled in this step, in row order
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<char> finished(static_cast<size_t>(B), 0);
  upload_uniforms(rows);
  start_sampling(model.prefill_on_backend(cache, batch), rows.size(), 0);
  std::vector<int32_t> next, next_rows, next_pos;  // the next step: its slots, their rows here, positions
  // Every slot still running has sampled step + 1 tokens, so the next step's token (this one's) is
  // at position length + step, and no slot runs past max_new_tokens steps.
  const auto plan_next = [&](int32_t step) {
    next.clear(), next_rows.clear(), next_pos.clear();
    if (step + 1 >= params.max_new_tokens) return;
    for (size_t r = 0; r < rows.size(); r++)
      if (!finished[size_t(rows[r])]) {
        next.push_back(rows[r]);
        next_rows.push_back(int32_t(r));
        next_pos.push_back(batch.lengths[size_t(rows[r])] + step);
      }
  };
  // Launches the next step from this step's tokens where they are, and samples it.
  const auto start_next = [&](int which) {
    upload_uniforms(next);
    const float* logits = model.decode_on_backend(cache, reinterpret_cast<const int32_t*>(sampled_dev[which].data()),
                                                  int64_t(rows.size()), next_rows, next, next_pos);
    start_sampling(logits, next.size(), 1 - which);
  };
  for (int32_t step = 0;; step++) {
    const int which = step % 2;
    // Ahead: step + 1 runs on the device while the host reads this step's tokens. Slots that this
    // step finishes are known only then, so they run one step more, whose samples are dropped (at
    // most one wasted row-step a sequence, and one whole step after the last stop token).
    if (params.launch_ahead) {
      plan_next(step);
      if (!next.empty()) start_next(which);
    }
    started.wait(which);
    const size_t R = rows.size();
    const uint32_t* sampled = sampled_host[which].data();
    for (size_t r = 0; r < R; r++) {
      const int32_t b = rows[r];
      if (finished[size_t(b)]) continue;  // finished in the step before: a step run ahead
      int32_t tok;
      float lp;
      std::memcpy(&tok, sampled + r, sizeof tok);
      std::memcpy(&lp, sampled + R + r, sizeof lp);
      if (tok < 0 || tok >= V_limit)
        throw std::runtime_error("generate(): the sampler returned token id " + std::to_string(tok) + ", outside [0, " +
                                 std::to_string(V_limit) + ")");
      if (append(b, tok, lp)) finished[size_t(b)] = 1;
    }
    if (!params.launch_ahead) {  // one step at a time: the next step's slots are all still running
      plan_next(step);
      if (!next.empty()) start_next(which);
    }
    if (next.empty()) break;
    rows = next;
  }
  if (tokenizer)
    for (int64_t b = 0; b < B; b++) out[b].text = utf8_lossy(bytes[size_t(b)]);
  return out;
}

}  // namespace azr::model
