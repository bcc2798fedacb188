#include "model/presets.h"

#include "model/byte_tokenizer.h"

namespace azr::model {
namespace {

ModelConfig byte_level(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t mlp) {
  ModelConfig c;
  c.model_type = "qwen2";
  c.architectures = {"Qwen2ForCausalLM"};
  // The byte tokenizer's ids: 256 bytes, then its special tokens (<|endoftext|> = 256, ...).
  const auto specials = ByteTokenizer::default_special_tokens();
  c.vocab_size = 256 + int64_t(specials.size());
  c.hidden_size = hidden;
  c.intermediate_size = mlp;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 4096;
  c.tie_word_embeddings = true;
  c.qkv_bias = true;
  c.bos_token_id = 256;  // <|endoftext|>
  c.eos_token_ids = {256, 258};  // <|endoftext|>, <|im_end|>
  c.torch_dtype = "float32";
  return c;
}

}  // namespace

std::vector<std::string> preset_names() { return {"azr-tiny", "azr-25m"}; }

ModelConfig preset_config(std::string_view name) {
  if (name == "azr-tiny") return byte_level(128, 4, 4, 2, 352);
  if (name == "azr-25m") return byte_level(512, 8, 8, 4, 1536);
  std::string known;
  for (const std::string& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("unknown model preset '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace azr::model
