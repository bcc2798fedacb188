// azr logprobs: score texts (or token ids) under a model, one log-prob per token.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/input.h"
#include "kernels/ops.h"
#include "model/json_text.h"
#include "model/tokenizer.h"
#include "model/transformer.h"

namespace azr::cli {

using nlohmann::json;

CLI::App* add_logprobs_command(CLI::App& app, LogprobsOptions& o) {
  CLI::App* c = app.add_subcommand("logprobs", "Per-token log-probabilities of texts under a model");
  c->footer(
      "Input: JSONL lines {\"text\": \"...\"} (encoded as `azr tokenize` does, no BOS) or {\"ids\": [...]}. Output: "
      "one line {\"ids\": [...], \"logprobs\": [null, ...]} per input line, in order, where logprobs[i] = "
      "log p(ids[i] | ids[<i]) at temperature 1 (the first token has no prediction: null). Blank input lines are "
      "skipped (they print nothing, as in `azr tokenize`). Every line is checked before anything is scored or "
      "printed, so a bad line (FILE:LINE: message, exit 2) leaves no partial output.");
  c->add_option("--model", o.model, "model directory (config.json + model.safetensors)")
      ->check(non_empty_path())->required();
  c->add_option("--jsonl", o.jsonl, "JSONL input, - for stdin")->check(non_empty_path())->required();
  c->add_option("--tokenizer", o.tokenizer, "tokenizer.json or its directory (default: MODEL/tokenizer.json)")
      ->check(non_empty_path());
  // A GPU forward runs one attention grid over the batch's sequences, whose z holds 65,535 (as
  // model::micro_batch_limit for training); the CPU has no such bound, but one limit for both keeps
  // a command line that works on one device working on the other.
  c->add_option("--batch-size", o.batch_size, "lines per forward pass (1 to 65,535, the GPU attention's grid)")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  c->add_option("--threads", o.threads, "CPU threads; 0 = all cores")->capture_default_str()
      ->check(between(0, kMaxThreads));
  add_device_option(c, o.device, /*generates=*/false);
  return c;
}

int run_logprobs(const LogprobsOptions& o) {
  kernels::set_cpu_threads(o.threads);
  model::Transformer m = load_model(o.model, o.device);
  const int64_t V = m.config().vocab_size;
  std::unique_ptr<model::BpeTokenizer> tok;  // loaded on the first "text" line: ids need none

  InputFile input(o.jsonl);
  std::vector<std::vector<int32_t>> seqs;
  JsonLines lines(input.stream(), input.name());
  for (json j; lines.next(j);) {
    const std::string where = lines.where();
    if (!j.is_object()) throw UsageError(where + "expected an object {\"text\": ...} or {\"ids\": [...]}");
    const bool has_text = j.contains("text"), has_ids = j.contains("ids");
    if (has_text == has_ids) throw UsageError(where + "give exactly one of the fields 'text' and 'ids'");
    std::vector<int32_t> ids;
    if (has_text) {
      if (!j["text"].is_string()) throw UsageError(where + "field 'text' must be a string");
      if (!tok) tok = load_model_tokenizer(o.model, o.tokenizer);
      try {
        ids = tok->encode(j["text"].get<std::string>());
      } catch (const model::TokenizerError& e) {
        throw UsageError(where + e.what());
      }
      if (ids.empty()) throw UsageError(where + "field 'text' is empty: it must encode to at least one token");
      check_ids_fit_model(ids, V, where);
    } else {
      if (!j["ids"].is_array()) throw UsageError(where + "field 'ids' must be an array of token ids");
      for (const json& v : j["ids"]) ids.push_back(token_id_in_line(v, V, where));
      if (ids.empty()) throw UsageError(where + "field 'ids' is empty");
    }
    seqs.push_back(std::move(ids));
  }
  // As generate says it (and HF): RoPE runs past the trained context, on positions the model was
  // never trained on.
  size_t longest = 0;
  for (const std::vector<int32_t>& ids : seqs) longest = std::max(longest, ids.size());
  if (const int64_t context = m.config().max_position_embeddings; context > 0 && int64_t(longest) > context)
    spdlog::warn("logprobs: a sequence of {} tokens passes the model's max_position_embeddings ({}): positions past "
                 "it are outside what the model was trained on",
                 longest, context);

  // Consecutive chunks keep the output in input order; score()'s logp[b*T + t] is logprobs[t].
  for (size_t start = 0; start < seqs.size(); start += size_t(o.batch_size)) {
    const size_t end = std::min(seqs.size(), start + size_t(o.batch_size));
    const std::vector<std::vector<int32_t>> chunk(seqs.begin() + long(start), seqs.begin() + long(end));
    const model::TokenScores s = m.score(model::SequenceBatch::from(chunk));
    for (size_t b = 0; b < chunk.size(); b++) {
      json lp = json::array({nullptr});
      for (size_t t = 1; t < chunk[b].size(); t++) lp.push_back(s.logp[b * size_t(s.T) + t]);
      std::cout << json{{"ids", chunk[b]}, {"logprobs", lp}}.dump() << '\n';
    }
  }
  return 0;
}

}  // namespace azr::cli
