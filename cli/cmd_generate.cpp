// azr generate: sample completions of one prompt from a Hugging Face checkpoint directory.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/number_checks.h"
#include "kernels/backend.h"
#include "kernels/ops.h"
#include "model/generate.h"
#include "model/hf_config.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"
#include "model/transformer.h"

namespace azr::cli {

using nlohmann::json;

void add_device_option(CLI::App* c, DeviceOptions& device, bool generates) {
  std::string known;
  for (const std::string& name : kernels::backend_names()) known += (known.empty() ? "" : ", ") + name;
  c->add_option("--device", device.device, "where the model runs: " + known)->capture_default_str();
  std::string precisions = "auto";
  for (const std::string& name : kernels::matmul_precision_names()) precisions += ", " + name;
  c->add_option("--matmul-precision", device.matmul_precision,
                "how the GEMMs multiply: " + precisions +
                    " (auto: bf16 on a GPU, fp32 elsewhere; bf16: operands rounded to bfloat16, fp32 sums; "
                    "tensor-core speed on a GPU, a reference on the CPU)")
      ->capture_default_str();
  if (generates) {
    // Two flags, not CLI11's "--a,!--no-a", which --help showed as "--a,--no-a{false}".
    CLI::Option* on = c->add_flag("--decode-graphs", device.decode_graphs,
                                  "record each decode step once and replay it (CUDA graphs: one launch per step "
                                  "instead of hundreds; the default; no effect on the CPU)");
    c->add_flag_callback(
         "--no-decode-graphs", [&device] { device.decode_graphs = false; },
         "launch each decode step's kernels as they come (to compare with the graphs' output or speed)")
        ->excludes(on);
  }
}

model::Transformer load_model(const std::string& dir, const DeviceOptions& device) {
  kernels::MatmulPrecision precision;
  try {
    precision = kernels::resolve_matmul_precision(device.matmul_precision, device.device);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--matmul-precision: " + std::string(e.what()));
  }
  const kernels::Ops* ops = nullptr;
  try {
    ops = &kernels::backend_ops(device.device, 0, precision);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--device: " + std::string(e.what()));
  }
  // --model takes the directory; its config.json named instead read "config.json/config.json".
  std::error_code error;
  if (std::filesystem::is_regular_file(dir, error))
    throw UsageError("--model " + dir + ": is a file; give the model directory (config.json, model.safetensors)");
  // A run directory of azr train: its models are its checkpoints.
  const std::filesystem::path checkpoints = std::filesystem::path(dir) / "checkpoints";
  if (!std::filesystem::exists(std::filesystem::path(dir) / "config.json", error) &&
      std::filesystem::is_directory(checkpoints, error))
    throw UsageError("--model " + dir + ": is a run directory of azr train, not a model; its models are its "
                     "checkpoints, " + checkpoints.string() + "/step-N");
  // ConfigError / SafetensorsError already name the file and the field or tensor at fault.
  try {
    model::Transformer m = model::Transformer::from_pretrained(dir, *ops);
    m.set_decode_graphs(device.decode_graphs);
    return m;
  } catch (const model::ConfigError& e) {
    throw UsageError(e.what());
  } catch (const model::SafetensorsError& e) {
    throw UsageError(e.what());
  }
}

std::unique_ptr<model::BpeTokenizer> load_model_tokenizer(const std::string& model_dir,
                                                          const std::string& tokenizer_arg) {
  namespace fs = std::filesystem;
  std::string path = tokenizer_arg.empty() ? model_dir + "/tokenizer.json" : tokenizer_arg;
  std::error_code ec;
  if (fs::is_directory(path, ec)) path += "/tokenizer.json";
  const bool exists = fs::exists(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) throw UsageError(path + ": " + ec.message());
  if (!exists)
    throw UsageError(path + ": no tokenizer file" +
                     (tokenizer_arg.empty() ? " in the model directory (give --tokenizer PATH)" : ""));
  try {
    return std::make_unique<model::BpeTokenizer>(path);
  } catch (const model::TokenizerError& e) {
    throw UsageError(e.what());
  }
}

void check_ids_fit_model(const std::vector<int32_t>& ids, int64_t vocab_rows, const std::string& where) {
  for (const int32_t id : ids)
    if (id >= vocab_rows)
      throw UsageError(where + "the tokenizer gives token id " + std::to_string(id) + ", past the model's " +
                       std::to_string(vocab_rows) + " embedding rows: it is not this model's tokenizer (--tokenizer)");
}

CLI::App* add_generate_command(CLI::App& app, GenerateOptions& o) {
  CLI::App* c = app.add_subcommand("generate", "Sample completions of a prompt from a model directory");
  c->footer(
      "Prints the completion text and a newline (with --num-samples N > 1, each after a line '--- sample i ---'), "
      "and a one-line summary on stderr. --json prints one object per sample instead: {\"text\", \"ids\", "
      "\"logprobs\", \"finish_reason\", \"prompt_tokens\", \"new_tokens\"}. The prompt is encoded as is (no "
      "chat template, no BOS). Generation stops at the eos_token_id of config.json and generation_config.json "
      "(unless --ignore-eos), any --stop-id "
      "(kept as the last token), or any --stop string (the text is cut before it).");
  c->add_option("--model", o.model, "model directory (config.json + model.safetensors)")
      ->check(non_empty_path())->required();
  c->add_option("--prompt", o.prompt, "the prompt text")->required();
  c->add_option("--max-tokens", o.max_tokens, "most new tokens per sample")
      ->capture_default_str()
      ->check(between(0, kMaxNewTokens));
  add_sampling_options(c, o.temperature, "sampling temperature; 0 = greedy", o.top_p)->capture_default_str();
  c->add_option("--top-k", o.top_k, "sample among the K most likely tokens; 0 = off")
      ->capture_default_str()
      ->check(between(0, INT32_MAX));
  c->add_option("--seed", o.seed, "random seed (each sample has its own stream)")
      ->capture_default_str()
      ->check(seed());
  c->add_option("--stop", o.stop, "stop at this string (repeatable)");
  c->add_option("--stop-id", o.stop_ids, "stop after this token id (repeatable)")->check(between(0, INT32_MAX));
  c->add_flag("--ignore-eos", o.ignore_eos, "do not stop at the eos_token_id of config.json or generation_config.json");
  c->add_option("--num-samples", o.num_samples, "samples of the prompt, run as one batch")
      ->capture_default_str()
      ->check(between(1, kMaxSamples));
  c->add_option("--tokenizer", o.tokenizer, "tokenizer.json or its directory (default: MODEL/tokenizer.json)")
      ->check(non_empty_path());
  c->add_option("--threads", o.threads, "CPU threads; 0 = all cores")->capture_default_str()
      ->check(between(0, kMaxThreads));
  c->add_flag("--json", o.json, "one JSON object per sample");
  add_device_option(c, o.device);
  return c;
}

int run_generate(const GenerateOptions& o) {
  kernels::set_cpu_threads(o.threads);
  model::Transformer m = load_model(o.model, o.device);
  auto tok = load_model_tokenizer(o.model, o.tokenizer);
  const int64_t V = m.config().vocab_size;

  std::vector<int32_t> prompt;
  try {
    prompt = tok->encode(*o.prompt);
  } catch (const model::TokenizerError& e) {
    throw UsageError(std::string("--prompt: ") + e.what());
  }
  if (prompt.empty()) throw UsageError("--prompt: the prompt must encode to at least one token");
  check_ids_fit_model(prompt, V, "--prompt: ");
  // RoPE extends past the trained context, but the model was never trained there (HF warns too).
  const int64_t context = m.config().max_position_embeddings;
  if (context > 0 && int64_t(prompt.size()) + o.max_tokens > context)
    spdlog::warn("generate: {} prompt tokens + --max-tokens {} pass the model's max_position_embeddings ({}): "
                 "tokens past it are outside what the model was trained on",
                 prompt.size(), o.max_tokens, context);

  model::SamplingParams p = model::sampling_defaults(m, *tok, !o.ignore_eos);
  p.temperature = o.temperature;
  p.top_p = o.top_p;
  p.top_k = o.top_k;
  p.max_new_tokens = o.max_tokens;
  p.seed = o.seed;
  p.stop_strings = o.stop;
  for (int32_t id : o.stop_ids) {
    if (id < 0 || id >= V) throw UsageError("--stop-id " + std::to_string(id) + " is outside [0, " + std::to_string(V) + ")");
    p.stop_token_ids.push_back(id);
  }

  if (o.temperature == 0 && o.num_samples > 1)
    spdlog::warn("generate: --temperature 0 decodes greedily, so the {} samples are the same; sample with a "
                 "temperature above 0 for different ones", o.num_samples);
  std::vector<std::vector<int32_t>> prompts(size_t(o.num_samples), prompt);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<model::Completion> out;
  try {
    out = model::generate(m, prompts, p, tok.get());
  } catch (const std::invalid_argument& e) {  // bad sampling values
    throw UsageError(e.what());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  size_t new_tokens = 0;
  std::string reasons;
  for (size_t i = 0; i < out.size(); i++) {
    const model::Completion& c = out[i];
    new_tokens += c.tokens.size();
    reasons += std::string(i ? "," : "") + model::finish_reason_name(c.finish);
    if (o.json) {
      json j{{"text", c.text}, {"ids", c.tokens}, {"logprobs", c.logprobs},
             {"finish_reason", model::finish_reason_name(c.finish)}, {"prompt_tokens", prompt.size()},
             {"new_tokens", c.tokens.size()}};
      std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    } else {
      if (out.size() > 1) std::cout << "--- sample " << i << " ---\n";
      std::cout << c.text << '\n';
    }
  }
  std::cout.flush();
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.1f", secs > 0 ? double(new_tokens) / secs : 0.0);
  std::cerr << "prompt tokens " << prompt.size() << ", new tokens " << new_tokens << ", finish " << reasons << ", "
            << rate << " tokens/s\n";
  return 0;
}

}  // namespace azr::cli
