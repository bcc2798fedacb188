#include "trainer/model_setup.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "model/byte_tokenizer.h"
#include "model/hf_config.h"
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
    return kernels::backend_ops(c.model.device, local_rank, kernels::parse_matmul_precision(c.model.matmul_precision));
  } catch (const std::invalid_argument& e) {
    throw UserError("model.device: " + std::string(e.what()));
  }
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
    if (c.model.preset.empty()) return load_model_dir(c.model.path, ops);
    model::ModelConfig mc;
    try {
      mc = model::preset_config(c.model.preset);
    } catch (const model::ConfigError& e) {
      throw UserError("model.preset: " + std::string(e.what()));
    }
    return model::Transformer::random(mc, derive_seed(c.run.seed, {0, 0}), float(c.model.init_std), ops);
  };
  model::Transformer m = made();
  m.set_recompute(c.model.recompute);
  return m;
}

std::unique_ptr<model::Tokenizer> make_tokenizer(const TrainConfig& c) {
  if (!c.model.preset.empty() && c.model.tokenizer.empty()) return std::make_unique<model::ByteTokenizer>();
  const std::string path = tokenizer_path(c);
  if (!fs::exists(path)) throw UserError(path + ": no tokenizer file (set model.tokenizer)");
  try {
    return std::make_unique<model::BpeTokenizer>(path);
  } catch (const model::TokenizerError& e) {
    throw UserError(e.what());
  }
}

void write_tokenizer(const TrainConfig& c, const model::Tokenizer& tok, const fs::path& dir) {
  if (auto* bt = dynamic_cast<const model::ByteTokenizer*>(&tok)) {
    bt->save_tokenizer_json((dir / "tokenizer.json").string(), /*use_regex=*/true);
    return;
  }
  fs::copy_file(tokenizer_path(c), dir / "tokenizer.json", fs::copy_options::overwrite_existing);
}

model::PromptStyle prompt_style(const TrainConfig& c) { return model::parse_prompt_style(c.algorithm.prompt_style); }

std::string prompt_style_warning(const TrainConfig& c) {
  if (c.model.path.empty()) return "";
  const std::filesystem::path record = std::filesystem::path(c.model.path) / "bootstrap.json";
  std::ifstream in(record);
  if (!in) return "";
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("prompt_style") || !j["prompt_style"].is_string()) return "";
  const std::string learned = j["prompt_style"].get<std::string>();
  if (learned == c.algorithm.prompt_style) return "";
  return "warning: " + record.string() + " says the model learned prompt_style \"" + learned +
         "\", but algorithm.prompt_style is \"" + c.algorithm.prompt_style + "\" (set algorithm.prompt_style = \"" +
         learned + "\")";
}

}  // namespace azr::trainer
