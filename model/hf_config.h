#pragma once
// Hugging Face `config.json` for the Qwen2 and Llama families: parsing, validation, the tensor
// list a checkpoint must hold, and the parameter count. Values and tensor names follow
// ../shared/research/qwen2.md §1. Everything the model needs is read from the file, never
// hard-coded per size (eps, rope_theta and max_position differ between otherwise equal models).
//
// Anything this code cannot run correctly (YaRN, sliding-window attention, a non-SiLU MLP) is
// rejected with an error rather than loaded and silently computed wrongly.
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace azr::model {

// Every problem with a config file or a checkpoint's tensor list. The message always starts with
// the source (a path, or "checkpoint") and names the field or tensor at fault.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Llama 3.x frequency-dependent RoPE scaling (`"rope_type": "llama3"`), the only scaling we run.
struct RopeScaling {
  std::string rope_type;  // always "llama3" for now
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 1.0;
  int64_t original_max_position_embeddings = 0;
};

struct ModelConfig {
  std::string model_type;                  // "qwen2" | "llama"
  std::vector<std::string> architectures;  // e.g. {"Qwen2ForCausalLM"}; informative only
  int64_t vocab_size = 0;                  // embedding rows; may exceed the tokenizer's size
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // == num_attention_heads when the field is absent (HF)
  int64_t head_dim = 0;             // explicit field if present, else hidden / heads
  double rms_norm_eps = 0.0;
  double rope_theta = 0.0;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";
  // Which projections carry a bias. Qwen2 hard-codes q/k/v bias and no o bias; Llama takes
  // `attention_bias` for all four and `mlp_bias` for the MLP.
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  std::optional<RopeScaling> rope_scaling;  // nullopt = plain RoPE
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // `eos_token_id` may be one id or a list
  // generation_config.json's `eos_token_id`, which transformers' generate() stops at instead of
  // config.json's (Qwen2.5-Instruct: config 151645, generation config [151645, 151643]). Empty
  // when the file is absent or has none; never written into config.json.
  std::vector<int64_t> generation_eos_token_ids;
  // That file as read, written back unchanged by save_pretrained (its sampling settings, which
  // azr does not use, stay for transformers); "" when there was none.
  std::string generation_config_json;
  std::string torch_dtype;  // "" when absent
  // Read so they round-trip and are visible; only `use_sliding_window: false` is accepted.
  bool use_sliding_window = false;
  std::optional<int64_t> sliding_window;
  std::optional<int64_t> max_window_layers;

  int64_t kv_groups() const { return num_attention_heads / num_key_value_heads; }
};

// Parses and validates config.json text. `source_name` starts every error message.
ModelConfig parse_config(std::string_view json_text, std::string_view source_name = "config.json");
// Reads `path` and parses it; errors name the path.
ModelConfig load_config(const std::string& path);

// The config as transformers writes it (the fields above, HF names), so a saved model loads in
// transformers and back here unchanged. write_config writes it atomically (temp + rename).
std::string config_to_json(const ModelConfig& c);
void write_config(const ModelConfig& c, const std::string& path);

// generation_config.json: only `eos_token_id` is read (into c.generation_eos_token_ids, checked
// against c.vocab_size); the sampling fields in it (temperature, top_p, ...) are not, since a run's
// sampling comes from its own config. A missing file leaves `c` as it is.
void parse_generation_config(std::string_view json_text, std::string_view source_name, ModelConfig& c);
void load_generation_config_if_present(const std::string& path, ModelConfig& c);
// Writes c.generation_config_json as it was read (nothing when none was), so a saved model stops
// where the loaded one did.
void write_generation_config(const ModelConfig& c, const std::string& path);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool optional = false;  // only lm_head.weight in a tied model
};

// The tensors a Hugging Face checkpoint of this config holds, in a stable order: embedding,
// layers 0..L-1, final norm, LM head.
std::vector<TensorSpec> expected_tensors(const ModelConfig& c);

// Checks a checkpoint's tensor list (name -> shape) against the config: every required tensor
// present with its exact shape, nothing unexpected (stale rotary `inv_freq` buffers excepted).
// Throws ConfigError listing the first few problems. Returns the name of the tensor that serves
// as the LM head: "lm_head.weight" when present, else "model.embed_tokens.weight" (tied models).
std::string check_checkpoint(const ModelConfig& c, const std::map<std::string, std::vector<int64_t>>& tensors,
                             std::string_view source_name = "checkpoint");

// Number of parameters; a tied LM head is counted once (it is the embedding).
int64_t parameter_count(const ModelConfig& c);

std::string shape_to_string(const std::vector<int64_t>& shape);  // "[896, 151936]"

}  // namespace azr::model
