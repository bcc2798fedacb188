#include "model/hf_config.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "model/json_text.h"

namespace azr::model {
namespace {

using nlohmann::json;

// No real model comes near this; the bound keeps every product of two sizes (a weight matrix's
// element count) far inside int64.
constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

std::string num_to_string(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// A short rendering of an offending value for error messages.
std::string describe(const json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + text;
}

// Typed access to the fields of one JSON object. `prefix` qualifies nested fields
// ("rope_scaling.") so messages name the full path.
class Fields {
 public:
  Fields(const json& obj, std::string source, std::string prefix = "")
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw ConfigError(source_ + ": field '" + prefix_ + std::string(key) + "' " + what);
  }

  // HF treats an explicit null like an absent field for optional values, so we do too.
  const json* find(std::string_view key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  const json& require(std::string_view key) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) fail(key, "is required but missing");
    return *it;
  }

  int64_t as_int(std::string_view key, const json& v) const {
    // Integers only: 896.0 or "896" in a size field means a broken writer, not a size.
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + describe(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      fail(key, "(" + v.dump() + ") is out of range");
    return v.get<int64_t>();
  }
  double as_number(std::string_view key, const json& v) const {
    if (!v.is_number()) fail(key, "must be a number, got " + describe(v));
    return v.get<double>();
  }

  int64_t req_int(std::string_view key) const { return as_int(key, require(key)); }
  std::optional<int64_t> opt_int(std::string_view key) const {
    const json* v = find(key);
    return v ? std::optional(as_int(key, *v)) : std::nullopt;
  }
  double req_number(std::string_view key) const { return as_number(key, require(key)); }
  bool opt_bool(std::string_view key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "must be true or false, got " + describe(*v));
    return v->get<bool>();
  }
  std::optional<std::string> opt_string(std::string_view key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(key, "must be a string, got " + describe(*v));
    return v->get<std::string>();
  }

  // A size: strictly positive and bounded.
  int64_t positive(std::string_view key, int64_t v) const {
    if (v <= 0) fail(key, "(" + std::to_string(v) + ") must be positive");
    if (v > kMaxSize) fail(key, "(" + std::to_string(v) + ") is implausibly large (max " + std::to_string(kMaxSize) + ")");
    return v;
  }
  // A token id: a row of the embedding.
  int64_t token_id(std::string_view key, int64_t id, int64_t vocab) const {
    if (id < 0 || id >= vocab)
      fail(key, "(" + std::to_string(id) + ") must be in [0, vocab_size) = [0, " + std::to_string(vocab) + ")");
    return id;
  }

 private:
  const json& obj_;
  std::string source_;
  std::string prefix_;
};

// The scaling block: `rope_scaling` (transformers 4.x files) or `rope_parameters` (5.x, which
// also holds rope_theta and says rope_type "default" for no scaling). `field` names it in errors.
std::optional<RopeScaling> parse_rope_scaling(const Fields& top, const char* field, const json* v,
                                              const std::string& source, const ModelConfig& c) {
  if (!v) return std::nullopt;
  if (!v->is_object()) top.fail(field, "must be an object or null, got " + describe(*v));
  Fields f(*v, source, std::string(field) + ".");
  // Newer configs say "rope_type", older ones "type"; HF reads either.
  std::string key = v->contains("rope_type") ? "rope_type" : "type";
  std::optional<std::string> type = f.opt_string(key);
  if (!type) f.fail("rope_type", std::string("is required when ") + field + " is an object");
  if (*type == "default") return std::nullopt;  // HF's name for "no scaling"
  if (*type != "llama3")
    f.fail(key, "('" + *type + "') is not supported (supported: \"llama3\", \"default\", or " + field + " null)");

  RopeScaling r;
  r.rope_type = *type;
  r.factor = f.req_number("factor");
  r.low_freq_factor = f.req_number("low_freq_factor");
  r.high_freq_factor = f.req_number("high_freq_factor");
  r.original_max_position_embeddings = f.positive("original_max_position_embeddings",
                                                  f.req_int("original_max_position_embeddings"));
  if (!(r.factor >= 1.0)) f.fail("factor", "(" + num_to_string(r.factor) + ") must be >= 1");
  if (!(r.low_freq_factor > 0.0))
    f.fail("low_freq_factor", "(" + num_to_string(r.low_freq_factor) + ") must be positive");
  // The llama3 formula interpolates over (low, high) and divides by their difference.
  if (!(r.high_freq_factor > r.low_freq_factor))
    f.fail("high_freq_factor", "(" + num_to_string(r.high_freq_factor) + ") must be greater than low_freq_factor (" +
                                   num_to_string(r.low_freq_factor) + ")");
  if (r.original_max_position_embeddings > c.max_position_embeddings)
    f.fail("original_max_position_embeddings",
           "(" + std::to_string(r.original_max_position_embeddings) + ") must not exceed max_position_embeddings (" +
               std::to_string(c.max_position_embeddings) + ")");
  return r;
}

void write_atomically(const std::string& path, const std::string& text, const char* what) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ConfigError(path + ": cannot write " + what);
    out << text;
    if (!out.flush()) throw ConfigError(path + ": write error");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw ConfigError(path + ": cannot rename " + tmp + " into place");
}

json parse_object(std::string_view json_text, const std::string& source) {
  json j;
  try {
    j = parse_json_bounded(json_text);
  } catch (const json::exception& e) {  // a syntax error, or a number past a double (out_of_range)
    throw ConfigError(source + ": invalid JSON: " + json_error_text(e));
  } catch (const JsonTooDeep& e) {
    throw ConfigError(source + ": " + e.what());
  }
  if (!j.is_object()) throw ConfigError(source + ": top level must be a JSON object, got " + describe(j));
  return j;
}

// `eos_token_id`: one id or a list of ids, each a row of the embedding.
std::vector<int64_t> eos_ids(const Fields& f, int64_t vocab_size) {
  std::vector<int64_t> ids;
  if (const json* eos = f.find("eos_token_id")) {
    if (eos->is_array()) {
      for (const json& e : *eos) ids.push_back(f.token_id("eos_token_id", f.as_int("eos_token_id", e), vocab_size));
    } else {
      ids.push_back(f.token_id("eos_token_id", f.as_int("eos_token_id", *eos), vocab_size));
    }
  }
  return ids;
}

}  // namespace

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

ModelConfig parse_config(std::string_view json_text, std::string_view source_name) {
  const std::string source(source_name);
  const json j = parse_object(json_text, source);
  Fields f(j, source);
  ModelConfig c;

  const json& model_type = f.require("model_type");
  if (!model_type.is_string()) f.fail("model_type", "must be a string, got " + describe(model_type));
  c.model_type = model_type.get<std::string>();
  if (c.model_type != "qwen2" && c.model_type != "llama")
    f.fail("model_type", "('" + c.model_type + "') is not supported (supported: \"qwen2\", \"llama\")");
  const bool qwen2 = c.model_type == "qwen2";

  if (const json* a = f.find("architectures")) {
    if (!a->is_array()) f.fail("architectures", "must be a list of strings, got " + describe(*a));
    for (const json& s : *a) {
      if (!s.is_string()) f.fail("architectures", "must be a list of strings, got an element " + describe(s));
      c.architectures.push_back(s.get<std::string>());
    }
  }

  c.vocab_size = f.positive("vocab_size", f.req_int("vocab_size"));
  c.hidden_size = f.positive("hidden_size", f.req_int("hidden_size"));
  c.intermediate_size = f.positive("intermediate_size", f.req_int("intermediate_size"));
  c.num_hidden_layers = f.positive("num_hidden_layers", f.req_int("num_hidden_layers"));
  c.num_attention_heads = f.positive("num_attention_heads", f.req_int("num_attention_heads"));
  c.num_key_value_heads =
      f.positive("num_key_value_heads", f.opt_int("num_key_value_heads").value_or(c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    f.fail("num_key_value_heads", "(" + std::to_string(c.num_key_value_heads) + ") must divide num_attention_heads (" +
                                      std::to_string(c.num_attention_heads) + ")");
  if (auto hd = f.opt_int("head_dim")) {
    c.head_dim = f.positive("head_dim", *hd);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      f.fail("num_attention_heads", "(" + std::to_string(c.num_attention_heads) + ") must divide hidden_size (" +
                                        std::to_string(c.hidden_size) + ") when head_dim is absent");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  // RoPE rotates pairs of dimensions (j, j + d/2).
  if (c.head_dim % 2 != 0)
    f.fail(f.find("head_dim") ? "head_dim" : "num_attention_heads",
           "gives head_dim " + std::to_string(c.head_dim) + ", which must be even for RoPE");

  // Every size is below 2^31, but their products are not bounded by that: 2^31 layers built a
  // list of 9 tensors a layer before anything refused them, and hidden = intermediate = 2^30
  // overflowed int64 in the count. 1e13 parameters (20 TB in bf16) is past any model azr runs.
  {
    const double hidden = double(c.hidden_size), q = double(c.num_attention_heads) * double(c.head_dim),
                 kv = double(c.num_key_value_heads) * double(c.head_dim);
    const double per_layer = hidden * (2 * q + 2 * kv) + 3 * hidden * double(c.intermediate_size) + 2 * hidden;
    const double total = double(c.num_hidden_layers) * per_layer + 2 * double(c.vocab_size) * hidden;
    if (!(total <= 1e13))
      f.fail("num_hidden_layers", "with these sizes gives about " + num_to_string(total) +
                                      " parameters, past the 1e13 azr can hold (a damaged config.json?)");
  }

  // Required although HF has class defaults: its defaults (eps 1e-6, theta 10000, 2048/32768
  // positions) are wrong for some of the models we load, and every real config states them, so a
  // missing one means a damaged file rather than an intent.
  c.rms_norm_eps = f.req_number("rms_norm_eps");
  if (!(c.rms_norm_eps > 0.0)) f.fail("rms_norm_eps", "(" + num_to_string(c.rms_norm_eps) + ") must be positive");
  // transformers 5.x writes rope_theta inside rope_parameters, 4.x at the top level; a file with
  // both must agree.
  const json* rope_params = f.find("rope_parameters");
  if (rope_params && !rope_params->is_object())
    f.fail("rope_parameters", "must be an object or null, got " + describe(*rope_params));
  const json* top_theta = f.find("rope_theta");
  const json* inner_theta = rope_params && rope_params->contains("rope_theta") ? &(*rope_params)["rope_theta"] : nullptr;
  auto positive_theta = [](const Fields& where, const json& v) {
    const double theta = where.as_number("rope_theta", v);
    if (!(theta > 0.0)) where.fail("rope_theta", "(" + num_to_string(theta) + ") must be positive");
    return theta;
  };
  if (inner_theta) {
    c.rope_theta = positive_theta(Fields(*rope_params, source, "rope_parameters."), *inner_theta);
    if (top_theta) {
      const double top = f.as_number("rope_theta", *top_theta);
      if (top != c.rope_theta)
        f.fail("rope_theta", "(" + num_to_string(top) + ") disagrees with rope_parameters.rope_theta (" +
                                 num_to_string(c.rope_theta) + ")");
    }
  } else {
    if (!top_theta) f.fail("rope_theta", "is required but missing (at the top level, or in rope_parameters)");
    c.rope_theta = positive_theta(f, *top_theta);
  }
  c.max_position_embeddings = f.positive("max_position_embeddings", f.req_int("max_position_embeddings"));

  // HF's default is false for both families; check_checkpoint catches a wrong guess because an
  // untied model must then ship lm_head.weight.
  c.tie_word_embeddings = f.opt_bool("tie_word_embeddings", false);

  c.hidden_act = f.opt_string("hidden_act").value_or("silu");
  if (c.hidden_act != "silu")
    f.fail("hidden_act", "('" + c.hidden_act + "') is not supported (supported: \"silu\")");

  if (qwen2) {
    // Qwen2Attention hard-codes these, whatever the config says.
    c.qkv_bias = true;
    c.o_bias = false;
    c.mlp_bias = false;
  } else {
    c.qkv_bias = c.o_bias = f.opt_bool("attention_bias", false);
    c.mlp_bias = f.opt_bool("mlp_bias", false);
  }

  // As transformers 5.x reads them: a non-null rope_scaling wins over rope_parameters.
  if (const json* rs = f.find("rope_scaling"))
    c.rope_scaling = parse_rope_scaling(f, "rope_scaling", rs, source, c);
  else
    c.rope_scaling = parse_rope_scaling(f, "rope_parameters", rope_params, source, c);

  if (auto bos = f.opt_int("bos_token_id")) c.bos_token_id = f.token_id("bos_token_id", *bos, c.vocab_size);
  c.eos_token_ids = eos_ids(f, c.vocab_size);

  // transformers >= 4.56 writes "dtype"; older files "torch_dtype".
  c.torch_dtype = f.opt_string("torch_dtype").value_or(f.opt_string("dtype").value_or(""));

  c.use_sliding_window = f.opt_bool("use_sliding_window", false);
  c.sliding_window = f.opt_int("sliding_window");
  c.max_window_layers = f.opt_int("max_window_layers");
  if (c.use_sliding_window)
    f.fail("use_sliding_window", "(true) is not supported: sliding-window attention is not implemented");
  return c;
}

ModelConfig load_config(const std::string& path) {
  constexpr size_t kMaxConfigBytes = size_t(16) << 20;  // Qwen2.5's are under 1 KB
  std::string text;
  if (const std::string why = read_file_at_most(path, kMaxConfigBytes, text); !why.empty())
    throw ConfigError(path + ": " +
                      (why.starts_with("cannot open") ? "cannot open config file" + why.substr(11) : why));
  return parse_config(text, path);
}

std::string config_to_json(const ModelConfig& c) {
  json j = json::object();
  j["architectures"] = c.architectures.empty()
                           ? std::vector<std::string>{c.model_type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}
                           : c.architectures;
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  if (c.head_dim != c.hidden_size / c.num_attention_heads || c.hidden_size % c.num_attention_heads != 0)
    j["head_dim"] = c.head_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_act"] = c.hidden_act;
  if (c.model_type == "llama") {
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = c.mlp_bias;
  }
  if (c.rope_scaling) {
    j["rope_scaling"] = {{"rope_type", c.rope_scaling->rope_type},
                         {"factor", c.rope_scaling->factor},
                         {"low_freq_factor", c.rope_scaling->low_freq_factor},
                         {"high_freq_factor", c.rope_scaling->high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling->original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  if (!c.torch_dtype.empty()) j["torch_dtype"] = c.torch_dtype;
  j["use_sliding_window"] = c.use_sliding_window;
  if (c.sliding_window) j["sliding_window"] = *c.sliding_window;
  if (c.max_window_layers) j["max_window_layers"] = *c.max_window_layers;
  return j.dump(2) + "\n";
}

void write_config(const ModelConfig& c, const std::string& path) {
  write_atomically(path, config_to_json(c), "config file");
}

void parse_generation_config(std::string_view json_text, std::string_view source_name, ModelConfig& c) {
  const std::string source(source_name);
  const json j = parse_object(json_text, source);
  c.generation_eos_token_ids = eos_ids(Fields(j, source), c.vocab_size);
  c.generation_config_json = std::string(json_text);
}

void load_generation_config_if_present(const std::string& path, ModelConfig& c) {
  constexpr size_t kMaxBytes = size_t(16) << 20;  // Qwen2.5's are under 1 KB
  std::string text;
  if (const std::string why = read_file_at_most(path, kMaxBytes, text); !why.empty()) {
    if (why.starts_with("cannot open") && !std::filesystem::exists(path)) return;
    throw ConfigError(path + ": " + why);
  }
  parse_generation_config(text, path, c);
}

void write_generation_config(const ModelConfig& c, const std::string& path) {
  if (!c.generation_config_json.empty()) write_atomically(path, c.generation_config_json, "generation config");
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  std::vector<TensorSpec> out;
  out.push_back({"model.embed_tokens.weight", {V, H}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {H}});
    // nn.Linear layout: [out_features, in_features].
    const struct { const char* name; int64_t rows, cols; bool bias; } linears[] = {
        {"self_attn.q_proj", q, H, c.qkv_bias},   {"self_attn.k_proj", kv, H, c.qkv_bias},
        {"self_attn.v_proj", kv, H, c.qkv_bias},  {"self_attn.o_proj", H, q, c.o_bias},
    };
    for (const auto& l : linears) {
      out.push_back({p + l.name + ".weight", {l.rows, l.cols}});
      if (l.bias) out.push_back({p + l.name + ".bias", {l.rows}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {H}});
    const struct { const char* name; int64_t rows, cols; } mlp[] = {
        {"mlp.gate_proj", I, H}, {"mlp.up_proj", I, H}, {"mlp.down_proj", H, I}};
    for (const auto& l : mlp) {
      out.push_back({p + l.name + ".weight", {l.rows, l.cols}});
      if (c.mlp_bias) out.push_back({p + l.name + ".bias", {l.rows}});
    }
  }
  out.push_back({"model.norm.weight", {H}});
  out.push_back({"lm_head.weight", {V, H}, c.tie_word_embeddings});
  return out;
}

namespace {
// Older Llama/Qwen checkpoints saved RoPE's inverse-frequency buffer; it is recomputed from the
// config, so it is harmless to find and ignore.
bool ignorable(const std::string& name) {
  static const std::string suffix = ".rotary_emb.inv_freq";
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::string check_checkpoint(const ModelConfig& c, const std::map<std::string, std::vector<int64_t>>& tensors,
                             std::string_view source_name) {
  constexpr size_t kShown = 5;  // enough to see a pattern, short enough to read
  // A layer has 9 tensors at least: a config that says more layers than the file has tensors is
  // refused before its tensor list is built, which for a lying num_hidden_layers of 2^31 took
  // 24 GB and the OOM killer. A near miss gets the list of missing tensors below.
  if (c.num_hidden_layers > int64_t(tensors.size()))
    throw ConfigError(std::string(source_name) + ": does not match the config: num_hidden_layers (" +
                      std::to_string(c.num_hidden_layers) + ") is more than the checkpoint's " +
                      std::to_string(tensors.size()) + " tensors");
  std::vector<std::string> problems;
  std::set<std::string> known;
  for (const TensorSpec& t : expected_tensors(c)) {
    known.insert(t.name);
    auto it = tensors.find(t.name);
    if (it == tensors.end()) {
      if (t.optional) continue;
      std::string p = "missing tensor '" + t.name + "' " + shape_to_string(t.shape);
      if (t.name == "lm_head.weight")
        p += " (tie_word_embeddings is false, so the embedding cannot serve as the LM head)";
      problems.push_back(std::move(p));
    } else if (it->second != t.shape) {
      problems.push_back("tensor '" + t.name + "' has shape " + shape_to_string(it->second) + ", expected " +
                         shape_to_string(t.shape));
    }
  }
  for (const auto& [name, shape] : tensors)
    if (!known.count(name) && !ignorable(name))
      problems.push_back("unexpected tensor '" + name + "' " + shape_to_string(shape));

  if (!problems.empty()) {
    std::string msg = std::string(source_name) + ": does not match the config (" + std::to_string(problems.size()) +
                      (problems.size() == 1 ? " problem): " : " problems): ");
    for (size_t i = 0; i < problems.size() && i < kShown; ++i) msg += (i ? "; " : "") + problems[i];
    if (problems.size() > kShown) msg += "; and " + std::to_string(problems.size() - kShown) + " more";
    throw ConfigError(msg);
  }
  return tensors.count("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight";
}

int64_t parameter_count(const ModelConfig& c) {
  int64_t n = 0;
  for (const TensorSpec& t : expected_tensors(c)) {
    if (t.optional) continue;  // a tied lm_head is the embedding, already counted
    int64_t e = 1;
    for (int64_t d : t.shape) e *= d;
    n += e;
  }
  return n;
}

}  // namespace azr::model
