// azr memory: where a run's device memory goes (weights, master weights, gradients, AdamW state,
// activations, KV cache) and the largest training micro-batch that fits a budget, from a model
// config alone: no weights are read and no device is touched, so a GPU run is planned anywhere.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/number_checks.h"
#include "model/hf_config.h"
#include "model/memory_plan.h"
#include "model/presets.h"

namespace azr::cli {

namespace {
// The plan's largest byte count is sequences x tokens x vocabulary x 4 (the LM head's logits):
// with these bounds and a vocabulary below 2**18 it stays under 2**62. Unbounded, --micro-batch
// 2**54 overflowed 64 bits and planned its LM head at 0 bytes.
constexpr int64_t kMaxTokens = int64_t{1} << 22;
constexpr int64_t kMaxSequences = int64_t{1} << 20;
}  // namespace

CLI::App* add_memory_command(CLI::App& app, MemoryOptions& o) {
  CLI::App* c = app.add_subcommand("memory", "Plan a run's device memory and the micro-batch that fits");
  c->footer(
      "MODEL is a model directory (its config.json), a config.json, or a preset (azr-tiny, azr-25m). "
      "bf16-mixed is the GPU plan (bf16 weights, activations and KV cache; fp32 master weights, gradients and "
      "AdamW state: 18 bytes per parameter), the default for either --device; fp32 is what the CPU backend "
      "holds (give --precision fp32 with --device cpu). "
      "--micro-batch 0 picks the largest that "
      "fits --budget-gib. Example, Qwen2.5-1.5B RL on one 80 GB GPU: azr memory MODEL_DIR --seq-len 4096 "
      "--kv-slots 256 --kv-capacity 4096");
  c->add_option("model", o.model, "model directory, config.json or preset")->check(non_empty_path())->required();
  c->add_option("--precision", o.precision, "bf16-mixed | fp32 | fp32+bf16-gemm (model.matmul_precision = \"bf16\" today)")->capture_default_str();
  c->add_option("--device", o.device, "cuda (2 GiB reserve: context, workspace, fragmentation) or cpu (0.5 GiB)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cuda", "cpu"}));
  c->add_option("--seq-len", o.seq_len, "tokens per training sequence")
      ->capture_default_str()
      ->check(between(1, kMaxTokens));
  c->add_option("--micro-batch", o.micro_batch, "sequences per micro-batch; 0 = the largest that fits")
      ->capture_default_str()
      ->check(between(0, kMaxSequences));
  c->add_flag("--recompute", o.recompute, "activation recomputation (keep each layer's input only)");
  c->add_option("--kv-slots", o.kv_slots, "sequences decoded together")
      ->capture_default_str()
      ->check(between(0, kMaxSequences));
  c->add_option("--kv-capacity", o.kv_capacity, "KV-cache positions per sequence (default: --seq-len)")
      ->check(between(0, kMaxTokens));
  // At most a PiB: 1e308 planned against an infinite budget and "fit" a micro-batch of 2^30.
  c->add_option("--budget-gib", o.budget_gib, "device memory, GiB")
      ->capture_default_str()
      ->check(positive_at_most(1 << 20));
  c->add_flag("--json", o.json, "one JSON object instead of the table");
  return c;
}

namespace {

model::ModelConfig resolve_config(const std::string& spec) {
  namespace fs = std::filesystem;
  try {
    std::error_code ec;
    const fs::file_status st = fs::status(spec, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) throw UsageError(spec + ": " + ec.message());
    if (fs::is_directory(st)) return model::load_config((fs::path(spec) / "config.json").string());
    if (fs::is_regular_file(st)) return model::load_config(spec);
    // A path that names nothing is a missing file, not an unknown preset's name.
    if (spec.find('/') != std::string::npos || spec.ends_with(".json")) {
      std::string presets;
      for (const std::string& name : model::preset_names()) presets += (presets.empty() ? "" : ", ") + name;
      throw UsageError(spec + ": no such model directory or config.json (the presets: " + presets + ")");
    }
    return model::preset_config(spec);
  } catch (const model::ConfigError& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

int run_memory(const MemoryOptions& o) {
  const model::ModelConfig config = resolve_config(o.model);
  model::MemoryPlanSettings s;
  try {
    s.precision = model::parse_precision(o.precision);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--precision: ") + e.what());
  }
  s.seq_len = o.seq_len;
  s.recompute = o.recompute;
  s.reserve_bytes = model::reserve_bytes_for(o.device);
  s.kv_slots = o.kv_slots;
  s.kv_capacity = o.kv_capacity >= 0 ? o.kv_capacity : o.seq_len;
  // A plan past the trained context is a valid plan of a run the model was not trained for
  // (RoPE extends, quality does not): said, as generate says it, and planned anyway.
  const int64_t context = config.max_position_embeddings;
  for (const auto& [flag, positions] : {std::pair{"--seq-len", s.seq_len}, std::pair{"--kv-capacity", s.kv_capacity}})
    if (context > 0 && positions > context)
      spdlog::warn("memory: {} {} passes the model's max_position_embeddings ({}): positions past it are outside "
                   "what the model was trained on",
                   flag, positions, context);
  if (const std::string why = model::micro_batch_limit_problem(s.seq_len, o.micro_batch); !why.empty())
    throw UsageError("memory: --seq-len " + std::to_string(s.seq_len) + ", --micro-batch " +
                     std::to_string(o.micro_batch) + ": " + why);
  const double budget = o.budget_gib * double(1ull << 30);
  // When even one sequence does not fit, show the plan of one: it says what overflows.
  const bool none_fit = o.micro_batch == 0 && model::max_micro_batch(config, s, budget) == 0;
  s.micro_batch = o.micro_batch > 0 ? o.micro_batch : std::max<int64_t>(1, model::max_micro_batch(config, s, budget));
  model::MemoryPlan p;
  try {
    p = model::plan_memory(config, s);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const bool fits = p.peak() <= budget;
  if (o.json) {
    nlohmann::ordered_json j = {{"parameters", p.parameters},
                                {"precision", model::precision_name(s.precision)},
                                {"device", o.device},
                                {"seq_len", s.seq_len},
                                {"micro_batch", s.micro_batch},
                                {"recompute", s.recompute},
                                {"kv_slots", s.kv_slots},
                                {"kv_capacity", s.kv_capacity},
                                {"bytes",
                                 {{"weights", p.weights},
                                  {"master_weights", p.master_weights},
                                  {"gradients", p.gradients},
                                  {"adam", p.adam},
                                  {"gemm_scratch", p.gemm_scratch},
                                  {"activations", p.activations},
                                  {"backward_scratch", p.backward_scratch},
                                  {"lm_head", p.lm_head},
                                  {"gemm_inputs", p.gemm_inputs},
                                  {"gradient_sums", p.gradient_sums},
                                  {"kv_cache", p.kv_cache},
                                  {"decode_buffers", p.decode_buffers},
                                  {"prefill_activations", p.prefill_activations},
                                  {"prefill_logits", p.prefill_logits},
                                  {"sampler", p.sampler},
                                  {"generation_gemm_inputs", p.generation_gemm_inputs},
                                  {"reserve", p.reserve},
                                  {"training_peak", p.training_peak()},
                                  {"generation_peak", p.generation_peak()}}},
                                {"budget_bytes", budget},
                                {"fits", fits}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << model::format_memory_plan(p, s, budget);
    if (none_fit) std::cout << "  not even one sequence of " << s.seq_len << " tokens fits the budget\n";
  }
  return fits ? 0 : 1;
}

}  // namespace azr::cli
