#include "trainer/model_setup.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "model/byte_tokenizer.h"
#include "model/hf_config.h"
#include "model/json_text.h"
#include "model/memory_plan.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "trainer/seeds.h"

namespace azr::trainer {

namespace fs = std::filesystem;

namespace {

std::string tokenizer_path(const TrainConfig& c) {
  std::string path = c.model.tokenizer.empty() ? c.model.path + "/tokenizer.json" : c.model.tokenizer;
  if (fs::is_directory(path)) path += "/tokenizer.json";
  return path;
}

}  // namespace

const kernels::Ops& model_backend(const TrainConfig& c, int local_rank) {
  try {
    return kernels::backend_ops(c.model.device, local_rank,
                                kernels::resolve_matmul_precision(c.model.matmul_precision, c.model.device));
  } catch (const std::invalid_argument& e) {
    throw UserError("model.device: " + std::string(e.what()));
  }
}

model::AdamWSettings adamw_settings(const TrainConfig& c) {
  return {.lr = c.algorithm.lr,
          .beta1 = c.algorithm.beta1,
          .beta2 = c.algorithm.beta2,
          .eps = c.algorithm.adam_eps,
          .weight_decay = c.algorithm.weight_decay};
}

model::ModelConfig model_config(const TrainConfig& c) {
  try {
    if (!c.model.preset.empty()) return model::preset_config(c.model.preset);
    return model::load_config((fs::path(c.model.path) / "config.json").string());
  } catch (const model::ConfigError& e) {
    throw UserError((c.model.preset.empty() ? "model.path: " : "model.preset: ") + std::string(e.what()));
  }
}

MicroBatchChoice resolve_micro_batch(const TrainConfig& c, int local_rank, int local_ranks) {
  const int64_t seq_len = int64_t(c.algorithm.max_prompt_tokens) + c.algorithm.max_response_tokens;
  if (const std::string why = model::micro_batch_limit_problem(seq_len, c.algorithm.micro_batch_size); !why.empty())
    throw UserError(fmt::format("algorithm.micro_batch_size = {}, max_prompt_tokens + max_response_tokens = {}: {}",
                                c.algorithm.micro_batch_size, seq_len, why));
  const model::ModelConfig mc = model_config(c);
  model::MemoryPlanSettings s;
  // The CPU's bf16 table keeps fp32 rounding copies instead (a reference, not a memory target):
  // the GPU's profile is the closer one there too.
  s.precision = kernels::resolve_matmul_precision(c.model.matmul_precision, c.model.device) ==
                        kernels::MatmulPrecision::Bf16
                    ? model::Precision::Fp32Bf16Gemm
                    : model::Precision::Fp32;
  s.seq_len = seq_len;
  s.recompute = c.model.recompute;
  s.reserve_bytes = model::reserve_bytes_for(c.model.device);
  // The generation phase too (memory_plan.h: the phases alternate, each on top of the persistent
  // state): a generate() call's KV cache at its worst, every slot as long as a training sequence.
  s.kv_slots = c.algorithm.generation_batch_size;
  s.kv_capacity = s.seq_len;
  constexpr double kGiB = double(1ull << 30);
  double budget = c.model.memory_gib * kGiB;
  std::string where = "model.memory_gib";
  if (budget <= 0) {
    try {
      budget = kernels::device_memory_bytes(c.model.device, local_rank, local_ranks);
    } catch (const std::invalid_argument& e) {
      throw UserError("model.device: " + std::string(e.what()));
    }
    where = c.model.device == "cuda" ? "the GPU's memory" : "this machine's memory";
    if (local_ranks > 1) where += ", this rank's share";
  }
  if (c.algorithm.micro_batch_size > 0) {
    // Given, it is taken as is; but a plan past the memory is said at start, not found as an
    // out-of-memory error minutes later (the 7B recipe on one 80 GB GPU: a 147 GiB peak).
    s.micro_batch = c.algorithm.micro_batch_size;
    const model::MemoryPlan plan = model::plan_memory(mc, s);
    if (plan.peak() <= budget) return {c.algorithm.micro_batch_size, ""};
    return {c.algorithm.micro_batch_size,
            fmt::format("warning: algorithm.micro_batch_size = {}: its plan peaks at {:.2f} GiB (training {:.2f}, "
                        "generation {:.2f}), past the {:.2f} GiB of {}; the run may run out of memory (`azr memory` "
                        "shows where it goes; 0 chooses the largest micro-batch that fits)",
                        c.algorithm.micro_batch_size, plan.peak() / kGiB, plan.training_peak() / kGiB,
                        plan.generation_peak() / kGiB, budget / kGiB, where)};
  }
  const int64_t n = model::max_micro_batch(mc, s, budget);
  s.micro_batch = std::max<int64_t>(n, 1);
  const model::MemoryPlan plan = model::plan_memory(mc, s);
  if (n == 0)
    throw UserError(fmt::format(
        "algorithm.micro_batch_size = 0: not even one sequence of {} tokens fits {:.2f} GiB ({}): its training "
        "peak is {:.2f} GiB (`azr memory` shows where it goes); set model.recompute = true, lower "
        "algorithm.max_prompt_tokens / max_response_tokens, or give micro_batch_size",
        s.seq_len, budget / kGiB, where, plan.training_peak() / kGiB));
  if (plan.generation_peak() > budget)
    throw UserError(fmt::format(
        "algorithm.micro_batch_size = 0: training fits {:.2f} GiB ({}), but generation does not: {} sequences "
        "of up to {} tokens decoded together peak at {:.2f} GiB, {:.2f} GiB of it the KV cache (`azr memory "
        "--kv-slots` shows where it goes); lower algorithm.generation_batch_size",
        budget / kGiB, where, s.kv_slots, s.seq_len, plan.generation_peak() / kGiB, plan.kv_cache / kGiB));
  const int size = int(std::min<int64_t>(n, std::numeric_limits<int>::max()));
  return {size, fmt::format("micro-batch: {} sequence(s) of up to {} tokens, the largest whose training peak "
                            "({:.2f} GiB, {}{}) fits {:.2f} GiB ({})",
                            size, s.seq_len, plan.training_peak() / kGiB, model::precision_name(s.precision),
                            s.recompute ? ", recompute" : "", budget / kGiB, where)};
}

model::Transformer load_model_dir(const fs::path& dir, const kernels::Ops& ops) {
  try {
    return model::Transformer::from_pretrained(dir, ops);
  } catch (const model::ConfigError& e) {
    throw UserError(e.what());
  } catch (const model::SafetensorsError& e) {
    throw UserError(e.what());
  }
}

model::Transformer initial_model(const TrainConfig& c, const kernels::Ops& ops) {
  auto made = [&]() {
    if (c.model.preset.empty()) {
      try {
        return load_model_dir(c.model.path, ops);
      } catch (const UserError& e) {
        throw UserError("model.path: " + std::string(e.what()));  // the key to fix, beside the file
      }
    }
    return model::Transformer::random(model_config(c), derive_seed(c.run.seed, {0, 0}), float(c.model.init_std), ops);
  };
  model::Transformer m = made();
  m.set_recompute(c.model.recompute);
  m.set_decode_graphs(c.model.decode_graphs);
  return m;
}

std::unique_ptr<model::Tokenizer> make_tokenizer(const TrainConfig& c) {
  if (!c.model.preset.empty() && c.model.tokenizer.empty()) return std::make_unique<model::ByteTokenizer>();
  const std::string path = tokenizer_path(c);
  // The key the file came from: model.tokenizer when set, else model.path's tokenizer.json (and
  // only then is setting model.tokenizer the advice).
  const std::string key = c.model.tokenizer.empty() ? "model.path: " : "model.tokenizer: ";
  if (!fs::is_regular_file(path))
    throw UserError(key + path + ": no tokenizer file" + (c.model.tokenizer.empty() ? " (set model.tokenizer)" : ""));
  try {
    return std::make_unique<model::BpeTokenizer>(path);
  } catch (const model::TokenizerError& e) {
    throw UserError(key + e.what());
  }
}

constexpr size_t kMaxTokenizerBytes = size_t(256) << 20;

std::string tokenizer_json(const TrainConfig& c, const model::Tokenizer& tok) {
  if (auto* bt = dynamic_cast<const model::ByteTokenizer*>(&tok)) return bt->tokenizer_json(/*use_regex=*/true);
  std::string bytes;
  const std::string path = tokenizer_path(c);
  if (const std::string why = model::read_file_at_most(path, kMaxTokenizerBytes, bytes); !why.empty())
    throw UserError(path + ": " + why);
  return bytes;
}

void refuse_a_tokenizer_unlike_the_checkpoints(const TrainConfig& c, const std::string& loaded,
                                               const fs::path& checkpoint) {
  if (!c.model.preset.empty() && c.model.tokenizer.empty()) return;  // the byte tokenizer, built in
  const fs::path saved = checkpoint / "tokenizer.json";
  if (!fs::exists(saved)) return;
  const std::string path = tokenizer_path(c);
  std::string then;
  const std::string why_saved = model::read_file_at_most(saved.string(), kMaxTokenizerBytes, then);
  if (!why_saved.empty()) throw UserError(saved.string() + ": " + why_saved);
  if (loaded != then)
    throw UserError(std::string(c.model.tokenizer.empty() ? "model.path: " : "model.tokenizer: ") + path +
                    " differs from the checkpoint's copy, " + saved.string() +
                    ", the tokenizer the run trained with: the checkpoint's weights would read other token ids; "
                    "restore the file the run used to resume");
}

void refuse_a_directory_that_cannot_be_made(const std::filesystem::path& dir, const std::string& what) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (!p.has_filename()) p = p.parent_path();  // "runs/a/": the directory itself
  for (; !ec; p = p.parent_path()) {  // the nearest part of the path that exists decides
    const fs::file_type type = fs::status(p, ec).type();
    // A symlink to nothing reads as not there, but mkdir cannot make a directory in its place.
    if (type == fs::file_type::not_found && fs::is_symlink(fs::symlink_status(p)))
      throw UserError(what + p.string() + " is a symlink to " + fs::read_symlink(p).string() +
                      ", which does not exist");
    if (type == fs::file_type::not_found && p.has_relative_path()) {
      ec.clear();
      continue;
    }
    if (ec) break;
    if (type != fs::file_type::directory) throw UserError(what + p.string() + " is not a directory");
    if (access(p.c_str(), W_OK | X_OK) != 0)
      throw UserError(what + "cannot write in " + p.string() + " (" + std::strerror(errno) + ")");
    return;
  }
  throw UserError(what + "cannot read " + p.string() + " (" + ec.message() + ")");
}

model::PromptStyle prompt_style(const TrainConfig& c) { return model::parse_prompt_style(c.algorithm.prompt_style); }

std::string prompt_style_warning(const TrainConfig& c) {
  if (c.model.path.empty()) return "";
  const auto learned = model::learned_prompt_style(c.model.path);
  if (!learned || model::prompt_style_name(learned->style) == c.algorithm.prompt_style) return "";
  const std::string name(model::prompt_style_name(learned->style));
  return "warning: " + learned->record.string() + " says the model learned prompt_style \"" + name +
         "\", but algorithm.prompt_style is \"" + c.algorithm.prompt_style + "\" (set algorithm.prompt_style = \"" +
         name + "\")";
}

}  // namespace azr::trainer
