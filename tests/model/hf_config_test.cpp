// config.json parsing/validation and the checkpoint tensor check. The expected numbers are the
// published ones in ../shared/research/qwen2.md §1 (and Meta's Llama-3-8B config), typed in by
// hand here; none comes from running this code.
#include "model/hf_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace azr::model {
namespace {

using nlohmann::json;
using Shapes = std::map<std::string, std::vector<int64_t>>;

// Qwen2.5-0.5B's config.json, as published (qwen2.md §1.1 row + common fields).
constexpr const char* kQwen05B = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 24,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// The other Qwen2.5 sizes: the table row on top of the common fields.
json qwen(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv, int64_t vocab, bool tie,
          int64_t max_pos) {
  json j = json::parse(kQwen05B);
  j["hidden_size"] = hidden;
  j["intermediate_size"] = inter;
  j["num_hidden_layers"] = layers;
  j["max_window_layers"] = layers;
  j["num_attention_heads"] = heads;
  j["num_key_value_heads"] = kv;
  j["vocab_size"] = vocab;
  j["tie_word_embeddings"] = tie;
  j["max_position_embeddings"] = max_pos;
  return j;
}

// Meta-Llama-3.1-8B's config.json (the llama3 rope_scaling block is the 3.1 one).
constexpr const char* kLlama3_8B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "vocab_size": 128256
})";

ModelConfig parse(const json& j) { return parse_config(j.dump(2), "config.json"); }

// The error text of parse(j), or "" when it parses.
std::string parse_error(const json& j) {
  try {
    parse(j);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string check_error(const ModelConfig& c, const Shapes& s) {
  try {
    check_checkpoint(c, s);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------- Qwen2.5 configs

TEST(HfConfig, Qwen05BEveryField) {
  ModelConfig c = parse_config(kQwen05B, "config.json");
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"Qwen2ForCausalLM"});
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.intermediate_size, 4864);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.num_attention_heads, 14);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.kv_groups(), 7);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.rope_scaling.has_value());
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151643});
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.use_sliding_window);
  EXPECT_EQ(c.sliding_window, 32768);
  EXPECT_EQ(c.max_window_layers, 24);
}

TEST(HfConfig, QwenSizesAndParameterCounts) {
  struct Row {
    const char* name;
    json j;
    int64_t head_dim, groups, params;
  };
  // qwen2.md §1.1 table; parameter counts from its "Checks on parameter counts" paragraph.
  const Row rows[] = {
      {"0.5B", qwen(896, 4864, 24, 14, 2, 151936, true, 32768), 64, 7, 494'032'768},
      {"1.5B", qwen(1536, 8960, 28, 12, 2, 151936, true, 32768), 128, 6, 1'543'714'304},
      {"3B", qwen(2048, 11008, 36, 16, 2, 151936, true, 32768), 128, 8, 3'085'938'688},
      {"7B", qwen(3584, 18944, 28, 28, 4, 152064, false, 131072), 128, 7, 7'615'616'512},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    ModelConfig c = parse(r.j);
    EXPECT_EQ(c.head_dim, r.head_dim);
    EXPECT_EQ(c.kv_groups(), r.groups);
    EXPECT_EQ(parameter_count(c), r.params);
    // Tied models may omit lm_head; the untied 7B must ship it.
    const TensorSpec last = expected_tensors(c).back();
    EXPECT_EQ(last.name, "lm_head.weight");
    EXPECT_EQ(last.optional, c.tie_word_embeddings);
  }
  EXPECT_EQ(parse(rows[3].j).vocab_size, 152064);
  EXPECT_FALSE(parse(rows[3].j).tie_word_embeddings);
}

TEST(HfConfig, QwenInstructEosList) {
  json j = json::parse(kQwen05B);
  j["eos_token_id"] = {151645, 151643};
  EXPECT_EQ(parse(j).eos_token_ids, (std::vector<int64_t>{151645, 151643}));
}

TEST(HfConfig, Qwen7BTensorShapes) {
  ModelConfig c = parse(qwen(3584, 18944, 28, 28, 4, 152064, false, 131072));
  Shapes want = {
      {"model.layers.27.self_attn.q_proj.weight", {3584, 3584}}, {"model.layers.27.self_attn.q_proj.bias", {3584}},
      {"model.layers.27.self_attn.k_proj.weight", {512, 3584}},  {"model.layers.27.self_attn.k_proj.bias", {512}},
      {"model.layers.27.self_attn.o_proj.weight", {3584, 3584}}, {"model.layers.27.mlp.down_proj.weight", {3584, 18944}},
      {"lm_head.weight", {152064, 3584}},
  };
  Shapes got;
  for (const TensorSpec& t : expected_tensors(c)) got[t.name] = t.shape;
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(got[name], shape) << name;
  }
  EXPECT_FALSE(got.count("model.layers.27.self_attn.o_proj.bias"));
  EXPECT_FALSE(got.count("model.layers.28.input_layernorm.weight"));
}

// ---------------------------------------------------------------- Llama

TEST(HfConfig, Llama3_8B) {
  ModelConfig c = parse_config(kLlama3_8B, "config.json");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.kv_groups(), 4);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->rope_type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling->factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling->low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling->high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 8192);
  // By hand: embed + lm_head = 2 * 128256 * 4096 = 1,050,673,152.
  // Per layer: q 4096*4096 = 16,777,216; k, v 1024*4096 = 4,194,304 each; o 16,777,216;
  // gate, up, down 3 * 14336 * 4096 = 176,160,768; two norms 8,192 -> 218,112,000.
  // 32 layers = 6,979,584,000; final norm 4,096. Total 8,030,261,248 (Meta's "8.03B").
  EXPECT_EQ(parameter_count(c), 8'030'261'248);
}

TEST(HfConfig, LlamaBiasFlags) {
  json j = json::parse(kLlama3_8B);
  j["num_hidden_layers"] = 1;
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  ModelConfig c = parse(j);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);  // Llama's attention_bias covers o_proj too
  EXPECT_TRUE(c.mlp_bias);
  Shapes got;
  for (const TensorSpec& t : expected_tensors(c)) got[t.name] = t.shape;
  EXPECT_EQ(got["model.layers.0.self_attn.k_proj.bias"], std::vector<int64_t>{1024});
  EXPECT_EQ(got["model.layers.0.self_attn.o_proj.bias"], std::vector<int64_t>{4096});
  EXPECT_EQ(got["model.layers.0.mlp.gate_proj.bias"], std::vector<int64_t>{14336});
  EXPECT_EQ(got["model.layers.0.mlp.down_proj.bias"], std::vector<int64_t>{4096});

  // Without the fields, Llama has no bias anywhere.
  j.erase("attention_bias");
  j.erase("mlp_bias");
  for (const TensorSpec& t : expected_tensors(parse(j)))
    EXPECT_EQ(t.name.find(".bias"), std::string::npos) << t.name;
}

TEST(HfConfig, Defaults) {
  json j = json::parse(kLlama3_8B);
  j.erase("num_key_value_heads");  // HF: equal to num_attention_heads (plain MHA)
  j.erase("tie_word_embeddings");  // HF default false
  j.erase("hidden_act");           // HF default silu
  j.erase("rope_scaling");
  j.erase("eos_token_id");
  j.erase("bos_token_id");
  j.erase("torch_dtype");
  ModelConfig c = parse(j);
  EXPECT_EQ(c.num_key_value_heads, 32);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.rope_scaling.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_EQ(c.torch_dtype, "");

  j["num_key_value_heads"] = nullptr;  // explicit null = absent, as in HF
  EXPECT_EQ(parse(j).num_key_value_heads, 32);
  j["dtype"] = "float32";  // newer transformers' spelling
  EXPECT_EQ(parse(j).torch_dtype, "float32");
}

TEST(HfConfig, ExplicitHeadDim) {
  // head_dim need not be hidden / heads when given (newer Llama-style configs).
  json j = json::parse(kLlama3_8B);
  j["head_dim"] = 256;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(expected_tensors(c)[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(expected_tensors(c)[2].shape, (std::vector<int64_t>{32 * 256, 4096}));
  EXPECT_EQ(expected_tensors(c)[5].name, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(expected_tensors(c)[5].shape, (std::vector<int64_t>{4096, 32 * 256}));
}

TEST(HfConfig, RopeScalingVariants) {
  json j = json::parse(kLlama3_8B);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_FALSE(parse(j).rope_scaling.has_value());
  // Older configs spell the key "type".
  j["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1},
                       {"high_freq_factor", 4},
                       {"original_max_position_embeddings", 8192}};
  ModelConfig c = parse(j);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(c.rope_scaling->high_freq_factor, 4.0);
}

// transformers 5.x writes RoPE settings in one block, rope_parameters, with rope_theta inside it
// and rope_type "default" for no scaling (its MIGRATION_GUIDE_V5; the CudaHfReference GPU test
// loads config.json files written by transformers 5 itself).
TEST(HfConfig, Transformers5RopeParameters) {
  json qwen = json::parse(kQwen05B);
  qwen.erase("rope_theta");
  qwen.erase("rope_scaling");
  qwen["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  ModelConfig c = parse(qwen);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_FALSE(c.rope_scaling.has_value());

  json llama = json::parse(kLlama3_8B);
  llama.erase("rope_theta");
  llama["rope_parameters"] = llama["rope_scaling"];
  llama["rope_parameters"]["rope_theta"] = 500000.0;
  llama.erase("rope_scaling");
  c = parse(llama);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->rope_type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling->factor, 8.0);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 8192);

  // Both spellings in one file: they must agree.
  qwen["rope_theta"] = 1000000.0;
  EXPECT_DOUBLE_EQ(parse(qwen).rope_theta, 1e6);
  qwen["rope_theta"] = 10000.0;
  EXPECT_EQ(parse_error(qwen), "config.json: field 'rope_theta' (10000) disagrees with rope_parameters.rope_theta (1e+06)");
  qwen.erase("rope_theta");
  qwen["rope_parameters"]["rope_theta"] = "1e6";
  EXPECT_EQ(parse_error(qwen).rfind("config.json: field 'rope_parameters.rope_theta' must be a number", 0), 0u);
  qwen["rope_parameters"]["rope_theta"] = -1.0;
  EXPECT_EQ(parse_error(qwen), "config.json: field 'rope_parameters.rope_theta' (-1) must be positive");
  qwen["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_EQ(parse_error(qwen).rfind("config.json: field 'rope_parameters.rope_type' ('yarn') is not supported", 0), 0u);
  qwen["rope_parameters"] = {{"rope_theta", 1e6}};
  EXPECT_EQ(parse_error(qwen), "config.json: field 'rope_parameters.rope_type' is required when rope_parameters is an object");
  qwen["rope_parameters"] = 1e6;
  EXPECT_EQ(parse_error(qwen).rfind("config.json: field 'rope_parameters' must be an object or null", 0), 0u);
}

TEST(HfConfig, LoadFromFile) {
  auto dir = std::filesystem::temp_directory_path() / ("azr_hf_config_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto path = (dir / "config.json").string();
  std::ofstream(path) << kQwen05B;
  EXPECT_EQ(load_config(path).hidden_size, 896);

  json bad = json::parse(kQwen05B);
  bad["hidden_size"] = "896";
  std::ofstream(path) << bad.dump();
  try {
    load_config(path);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": field 'hidden_size'"), std::string::npos) << e.what();
  }

  auto missing = (dir / "nope" / "config.json").string();
  try {
    load_config(missing);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), missing + ": cannot open config file (No such file or directory)");
  }
  std::filesystem::remove_all(dir);
}

// Qwen2.5-1.5B-Instruct's generation_config.json as published (eos 151645 = <|im_end|>, 151643 =
// <|endoftext|>); its config.json says eos 151645 alone. Only eos_token_id is read.
constexpr const char* kQwenInstructGenerationConfig = R"({
  "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true,
  "eos_token_id": [151645, 151643], "repetition_penalty": 1.1,
  "temperature": 0.7, "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"
})";

TEST(HfConfig, GenerationConfigEosIsReadAndWritten) {
  auto dir = std::filesystem::temp_directory_path() / ("azr_gen_config_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "generation_config.json").string();
  ModelConfig c = parse(json::parse(kQwen05B));
  load_generation_config_if_present(path, c);  // no file: nothing changes
  EXPECT_TRUE(c.generation_eos_token_ids.empty());

  std::ofstream(path) << kQwenInstructGenerationConfig;
  load_generation_config_if_present(path, c);
  EXPECT_EQ(c.generation_eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(json::parse(config_to_json(c))["eos_token_id"], 151643);  // config.json keeps its own

  ModelConfig back = parse(json::parse(kQwen05B));
  std::filesystem::remove(path);
  write_generation_config(c, path);  // as it was read: the sampling settings stay for transformers
  load_generation_config_if_present(path, back);
  EXPECT_EQ(back.generation_eos_token_ids, c.generation_eos_token_ids);
  EXPECT_EQ(json::parse(back.generation_config_json)["top_k"], 20);


  parse_generation_config(R"({"eos_token_id": 7})", "g.json", back);
  EXPECT_EQ(back.generation_eos_token_ids, std::vector<int64_t>{7});
  parse_generation_config(R"({"temperature": 0.7})", "g.json", back);  // no eos: none
  EXPECT_TRUE(back.generation_eos_token_ids.empty());
  std::filesystem::remove(path);
  write_generation_config(back, path);  // a file read is written back, ids or not
  EXPECT_EQ(json::parse(std::ifstream(path)), json::parse(R"({"temperature": 0.7})"));
  std::filesystem::remove(path);
  write_generation_config(parse(json::parse(kQwen05B)), path);  // nothing read: no file
  EXPECT_FALSE(std::filesystem::exists(path));
  std::filesystem::remove_all(dir);
}

TEST(HfConfigErrors, BadGenerationConfigNamesTheFileAndField) {
  ModelConfig c = parse(json::parse(kQwen05B));
  auto message = [&](const char* text) {
    try {
      parse_generation_config(text, "m/generation_config.json", c);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(R"({"eos_token_id": 151936})"),
            "m/generation_config.json: field 'eos_token_id' (151936) must be in [0, vocab_size) = [0, 151936)");
  EXPECT_EQ(message(R"({"eos_token_id": [151643, "x"]})"),
            "m/generation_config.json: field 'eos_token_id' must be an integer, got string \"x\"");
  EXPECT_EQ(message("[1]"), "m/generation_config.json: top level must be a JSON object, got array [1]");
  EXPECT_EQ(message("{").rfind("m/generation_config.json: invalid JSON: ", 0), 0u) << message("{");
}

// ---------------------------------------------------------------- bad input

TEST(HfConfigErrors, InvalidJsonGivesLineAndColumn) {
  std::string text = "{\n  \"model_type\": \"qwen2\",\n  \"hidden_size\": 896,,\n}";
  try {
    parse_config(text, "some/dir/config.json");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("some/dir/config.json: invalid JSON: ", 0), 0u) << m;
    // The second ',' is column 22 of line 3; the library's "[json.exception...]" tag is dropped.
    EXPECT_NE(m.find(": parse error at line 3, column 22: "), std::string::npos) << m;
    EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;
  }
  EXPECT_NE(std::string(parse_error(json::array({1, 2}))).find("config.json: top level must be a JSON object"),
            std::string::npos);
}

// An unterminated string: the library's message ends with all it read of the string, the rest of
// the file. The error keeps 60 bytes of it (never half a UTF-8 character) and says how long it was.
TEST(HfConfigErrors, AnUnterminatedStringIsQuotedShort) {
  std::string text = "{\"model_type\": \"";
  for (int i = 0; i < 3000; i++) text += "\xc3\xa9";  // 'é', 2 bytes
  try {
    parse_config(text, "config.json");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_LT(m.size(), 300u) << m.substr(0, 400);
    // Read: the opening quote and 6,000 bytes; kept: the quote and 29 whole characters (59 bytes).
    const std::string kept = "last read: '\"" + text.substr(16, 58) + "...' (6001 bytes)";
    EXPECT_NE(m.find(kept), std::string::npos) << m;
    // The 16 bytes before the string and its 6,000: the library stops at the end, column 6,017.
    EXPECT_EQ(m.rfind("config.json: invalid JSON: parse error at line 1, column 6017: ", 0), 0u) << m;
  }
  // The same as a key: the parser adds what it expected after the excerpt, which is kept.
  try {
    parse_config("{\"" + std::string(6000, 'x'), "config.json");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_LT(m.size(), 300u) << m.substr(0, 400);
    EXPECT_NE(m.find("...' (6001 bytes); expected string literal"), std::string::npos) << m;
  }
  // A number past a double's range is nlohmann's out_of_range, not a parse_error: it escaped as
  // "azr: error: [json.exception.out_of_range.406] ...", exit 1.
  try {
    parse_config("{\"vocab_size\": 1e400}", "config.json");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("config.json: invalid JSON: number overflow", 0), 0u) << e.what();
  }
}

// A field 200,000 levels deep: describing it in the error recursed once per level and overflowed
// the stack. Refused at 64 levels; and /dev/zero as the file is refused at 16 MiB.
TEST(HfConfigErrors, DeepNestingAndEndlessFilesAreRefused) {
  const std::string text = "{\"vocab_size\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  try {
    parse_config(text, "config.json");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "config.json: nests deeper than 64 levels");
  }
  try {
    load_config("/dev/zero");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "/dev/zero: is larger than 16 MiB");
  }
}

TEST(HfConfigErrors, MissingRequiredField) {
  for (const char* field : {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "rms_norm_eps", "rope_theta", "max_position_embeddings"}) {
    json j = json::parse(kQwen05B);
    j.erase(field);
    const std::string want = std::string("config.json: field '") + field + "' is required but missing";
    EXPECT_EQ(parse_error(j).rfind(want, 0), 0u) << parse_error(j);
  }
}

TEST(HfConfigErrors, WrongType) {
  struct Case {
    const char* field;
    json value;
    const char* expect;
  };
  const Case cases[] = {
      {"hidden_size", "896", "config.json: field 'hidden_size' must be an integer, got string \"896\""},
      {"num_hidden_layers", 24.0, "config.json: field 'num_hidden_layers' must be an integer, got number 24.0"},
      {"vocab_size", true, "config.json: field 'vocab_size' must be an integer, got boolean true"},
      {"rms_norm_eps", "1e-6", "config.json: field 'rms_norm_eps' must be a number, got string \"1e-6\""},
      {"tie_word_embeddings", 1, "config.json: field 'tie_word_embeddings' must be true or false, got number 1"},
      {"eos_token_id", json::array({151643, "x"}), "config.json: field 'eos_token_id' must be an integer, got string \"x\""},
      {"model_type", 2, "config.json: field 'model_type' must be a string, got number 2"},
      {"architectures", "Qwen2ForCausalLM", "config.json: field 'architectures' must be a list of strings"},
      {"rope_scaling", 4, "config.json: field 'rope_scaling' must be an object or null, got number 4"},
      {"hidden_size", nullptr, "config.json: field 'hidden_size' must be an integer, got null"},
  };
  for (const Case& k : cases) {
    json j = json::parse(kQwen05B);
    j[k.field] = k.value;
    std::string m = parse_error(j);
    EXPECT_EQ(m.rfind(k.expect, 0), 0u) << "got: " << m;
  }
}

TEST(HfConfigErrors, InconsistentValues) {
  struct Case {
    json patch;
    const char* expect;
  };
  const Case cases[] = {
      {{{"num_key_value_heads", 3}},
       "config.json: field 'num_key_value_heads' (3) must divide num_attention_heads (14)"},
      {{{"num_attention_heads", 15}, {"num_key_value_heads", 3}},
       "config.json: field 'num_attention_heads' (15) must divide hidden_size (896) when head_dim is absent"},
      {{{"hidden_size", 0}}, "config.json: field 'hidden_size' (0) must be positive"},
      {{{"intermediate_size", -4864}}, "config.json: field 'intermediate_size' (-4864) must be positive"},
      {{{"num_hidden_layers", 0}}, "config.json: field 'num_hidden_layers' (0) must be positive"},
      {{{"vocab_size", -1}}, "config.json: field 'vocab_size' (-1) must be positive"},
      {{{"num_key_value_heads", 0}}, "config.json: field 'num_key_value_heads' (0) must be positive"},
      {{{"head_dim", 0}}, "config.json: field 'head_dim' (0) must be positive"},
      {{{"head_dim", 63}}, "config.json: field 'head_dim' gives head_dim 63, which must be even for RoPE"},
      {{{"max_position_embeddings", 0}}, "config.json: field 'max_position_embeddings' (0) must be positive"},
      {{{"hidden_size", 1ll << 40}}, "config.json: field 'hidden_size' (1099511627776) is implausibly large"},
      // 0.5B's layer holds 896 * (2 * 896 + 2 * 128) + 3 * 896 * 4864 + 2 * 896 = 14,911,232
      // parameters, so 2^31 - 1 layers are about 3.2e16.
      {{{"num_hidden_layers", 2147483647}},
       "config.json: field 'num_hidden_layers' with these sizes gives about 3.20216e+16 parameters, past the 1e13"},
      {{{"hidden_size", 1 << 30}, {"intermediate_size", 1 << 30}, {"num_attention_heads", 1 << 20}},
       "config.json: field 'num_hidden_layers' with these sizes gives about"},
      {{{"rms_norm_eps", 0}}, "config.json: field 'rms_norm_eps' (0) must be positive"},
      {{{"rms_norm_eps", -1e-6}}, "config.json: field 'rms_norm_eps' (-1e-06) must be positive"},
      {{{"rope_theta", 0.0}}, "config.json: field 'rope_theta' (0) must be positive"},
      {{{"model_type", "mistral"}},
       "config.json: field 'model_type' ('mistral') is not supported (supported: \"qwen2\", \"llama\")"},
      {{{"hidden_act", "gelu"}}, "config.json: field 'hidden_act' ('gelu') is not supported (supported: \"silu\")"},
      {{{"use_sliding_window", true}}, "config.json: field 'use_sliding_window' (true) is not supported"},
      {{{"eos_token_id", 151936}},
       "config.json: field 'eos_token_id' (151936) must be in [0, vocab_size) = [0, 151936)"},
      {{{"bos_token_id", -1}}, "config.json: field 'bos_token_id' (-1) must be in [0, vocab_size)"},
      {{{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}}},
       "config.json: field 'rope_scaling.rope_type' ('yarn') is not supported"},
      {{{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}},
       "config.json: field 'rope_scaling.type' ('linear') is not supported"},
      {{{"rope_scaling", {{"factor", 2.0}}}}, "config.json: field 'rope_scaling.rope_type' is required"},
  };
  for (const Case& k : cases) {
    json j = json::parse(kQwen05B);
    j.update(k.patch);
    std::string m = parse_error(j);
    EXPECT_EQ(m.rfind(k.expect, 0), 0u) << "patch " << k.patch.dump() << "\n got: " << m;
  }
}

TEST(HfConfigErrors, BadLlama3RopeScaling) {
  struct Case {
    const char* erase;  // or nullptr
    json patch;
    const char* expect;
  };
  const Case cases[] = {
      {"factor", json::object(), "config.json: field 'rope_scaling.factor' is required but missing"},
      {"original_max_position_embeddings", json::object(),
       "config.json: field 'rope_scaling.original_max_position_embeddings' is required but missing"},
      {nullptr, {{"high_freq_factor", 1.0}},
       "config.json: field 'rope_scaling.high_freq_factor' (1) must be greater than low_freq_factor (1)"},
      {nullptr, {{"factor", 0.5}}, "config.json: field 'rope_scaling.factor' (0.5) must be >= 1"},
      {nullptr, {{"low_freq_factor", "1"}}, "config.json: field 'rope_scaling.low_freq_factor' must be a number"},
      {nullptr, {{"original_max_position_embeddings", 262144}},
       "config.json: field 'rope_scaling.original_max_position_embeddings' (262144) must not exceed "
       "max_position_embeddings (131072)"},
  };
  for (const Case& k : cases) {
    json j = json::parse(kLlama3_8B);
    if (k.erase) j["rope_scaling"].erase(k.erase);
    j["rope_scaling"].update(k.patch);
    std::string m = parse_error(j);
    EXPECT_EQ(m.rfind(k.expect, 0), 0u) << "got: " << m;
  }
}

// ---------------------------------------------------------------- checkpoint check

// A tiny Qwen2: vocab 32, hidden 8, intermediate 16, 2 heads of 4, 1 kv head, 2 layers.
json tiny_json(bool tie) {
  json j = json::parse(kQwen05B);
  j.update({{"vocab_size", 32},
            {"hidden_size", 8},
            {"intermediate_size", 16},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 2},
            {"num_key_value_heads", 1},
            {"max_window_layers", 2},
            {"bos_token_id", 0},
            {"eos_token_id", 1},
            {"tie_word_embeddings", tie}});
  return j;
}

// Its tensors, written out by hand from qwen2.md §1.3 (q = 2*4 = 8 rows, k/v = 1*4 = 4 rows).
Shapes tiny_tensors(bool with_lm_head) {
  Shapes s = {{"model.embed_tokens.weight", {32, 8}}, {"model.norm.weight", {8}}};
  for (const char* p : {"model.layers.0.", "model.layers.1."}) {
    std::string l = p;
    s[l + "input_layernorm.weight"] = {8};
    s[l + "self_attn.q_proj.weight"] = {8, 8};
    s[l + "self_attn.q_proj.bias"] = {8};
    s[l + "self_attn.k_proj.weight"] = {4, 8};
    s[l + "self_attn.k_proj.bias"] = {4};
    s[l + "self_attn.v_proj.weight"] = {4, 8};
    s[l + "self_attn.v_proj.bias"] = {4};
    s[l + "self_attn.o_proj.weight"] = {8, 8};
    s[l + "post_attention_layernorm.weight"] = {8};
    s[l + "mlp.gate_proj.weight"] = {16, 8};
    s[l + "mlp.up_proj.weight"] = {16, 8};
    s[l + "mlp.down_proj.weight"] = {8, 16};
  }
  if (with_lm_head) s["lm_head.weight"] = {32, 8};
  return s;
}

TEST(CheckCheckpoint, TinyExpectedListAndCount) {
  ModelConfig tied = parse(tiny_json(true));
  // 1 embedding + 2 * 12 per layer + final norm + optional lm_head.
  EXPECT_EQ(expected_tensors(tied).size(), 27u);
  Shapes from_config;
  for (const TensorSpec& t : expected_tensors(tied)) from_config[t.name] = t.shape;
  EXPECT_EQ(from_config, tiny_tensors(true));
  // By hand: embed 256; per layer 16 (norms) + 72 (q) + 36 (k) + 36 (v) + 64 (o) + 384 (mlp) = 608;
  // final norm 8. Tied: 256 + 1216 + 8 = 1480; untied adds lm_head 256.
  EXPECT_EQ(parameter_count(tied), 1480);
  EXPECT_EQ(parameter_count(parse(tiny_json(false))), 1736);
}

TEST(CheckCheckpoint, CompleteCheckpointsPass) {
  ModelConfig untied = parse(tiny_json(false));
  ModelConfig tied = parse(tiny_json(true));
  EXPECT_EQ(check_checkpoint(untied, tiny_tensors(true)), "lm_head.weight");
  // Tied: fall back to the embedding, or use lm_head when a re-saved fine-tune ships it.
  EXPECT_EQ(check_checkpoint(tied, tiny_tensors(false)), "model.embed_tokens.weight");
  EXPECT_EQ(check_checkpoint(tied, tiny_tensors(true)), "lm_head.weight");
  // Stale RoPE buffers from older exports are ignored.
  Shapes s = tiny_tensors(true);
  s["model.layers.0.self_attn.rotary_emb.inv_freq"] = {2};
  EXPECT_EQ(check_checkpoint(untied, s), "lm_head.weight");
}

TEST(CheckCheckpoint, MissingTensor) {
  Shapes s = tiny_tensors(true);
  s.erase("model.layers.1.mlp.up_proj.weight");
  EXPECT_EQ(check_error(parse(tiny_json(false)), s),
            "checkpoint: does not match the config (1 problem): missing tensor 'model.layers.1.mlp.up_proj.weight' [16, 8]");
  s = tiny_tensors(true);
  s.erase("model.layers.0.self_attn.k_proj.bias");  // Qwen2 must have the q/k/v biases
  EXPECT_EQ(check_error(parse(tiny_json(false)), s),
            "checkpoint: does not match the config (1 problem): missing tensor 'model.layers.0.self_attn.k_proj.bias' [4]");
}

TEST(CheckCheckpoint, WrongShape) {
  Shapes s = tiny_tensors(false);
  s["model.layers.0.self_attn.k_proj.weight"] = {8, 8};  // written as if kv heads == heads
  EXPECT_EQ(check_error(parse(tiny_json(true)), s),
            "checkpoint: does not match the config (1 problem): tensor 'model.layers.0.self_attn.k_proj.weight' has "
            "shape [8, 8], expected [4, 8]");
  s = tiny_tensors(false);
  s["model.layers.1.mlp.down_proj.weight"] = {16, 8};  // transposed
  EXPECT_EQ(check_error(parse(tiny_json(true)), s),
            "checkpoint: does not match the config (1 problem): tensor 'model.layers.1.mlp.down_proj.weight' has "
            "shape [16, 8], expected [8, 16]");
  s = tiny_tensors(true);
  s["lm_head.weight"] = {33, 8};  // an optional tensor, when present, must still fit
  EXPECT_EQ(check_error(parse(tiny_json(true)), s),
            "checkpoint: does not match the config (1 problem): tensor 'lm_head.weight' has shape [33, 8], expected "
            "[32, 8]");
}

TEST(CheckCheckpoint, UntiedWithoutLmHead) {
  EXPECT_EQ(check_error(parse(tiny_json(false)), tiny_tensors(false)),
            "checkpoint: does not match the config (1 problem): missing tensor 'lm_head.weight' [32, 8] "
            "(tie_word_embeddings is false, so the embedding cannot serve as the LM head)");
}

TEST(CheckCheckpoint, ExtraTensor) {
  Shapes s = tiny_tensors(true);
  s["model.layers.2.input_layernorm.weight"] = {8};  // a third layer the config does not have
  EXPECT_EQ(check_error(parse(tiny_json(false)), s),
            "checkpoint: does not match the config (1 problem): unexpected tensor "
            "'model.layers.2.input_layernorm.weight' [8]");
  s = tiny_tensors(true);
  s["model.layers.0.self_attn.o_proj.bias"] = {8};  // Qwen2 has no o_proj bias
  EXPECT_EQ(check_error(parse(tiny_json(false)), s),
            "checkpoint: does not match the config (1 problem): unexpected tensor "
            "'model.layers.0.self_attn.o_proj.bias' [8]");
}

// A config that says more layers than the file has tensors is refused before its tensor list is
// built: 2^31 - 1 layers built strings until the OOM killer came. A near miss lists what is missing.
TEST(CheckCheckpoint, MoreLayersThanTheFileHoldsIsRefusedAtOnce) {
  json j = tiny_json(false);
  j["num_hidden_layers"] = 2147483647;
  EXPECT_EQ(check_error(parse(j), tiny_tensors(true)),
            "checkpoint: does not match the config: num_hidden_layers (2147483647) is more than the checkpoint's 27 "
            "tensors");
  j["num_hidden_layers"] = 3;
  EXPECT_NE(check_error(parse(j), tiny_tensors(true)).find("missing tensor 'model.layers.2.input_layernorm.weight'"),
            std::string::npos);
}

TEST(CheckCheckpoint, ReportsFirstFewProblems) {
  // A checkpoint for a model with hidden 16 against the hidden-8 config: almost everything is off.
  Shapes s;
  for (const auto& [name, shape] : tiny_tensors(true)) {
    std::vector<int64_t> doubled = shape;
    for (auto& d : doubled) d *= 2;
    s[name] = doubled;
  }
  std::string m = check_error(parse(tiny_json(false)), s);
  EXPECT_EQ(m.rfind("checkpoint: does not match the config (27 problems): tensor 'model.embed_tokens.weight' has "
                    "shape [64, 16], expected [32, 8]; tensor 'model.layers.0.input_layernorm.weight' has shape "
                    "[16], expected [8]; ",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("; and 22 more"), std::string::npos) << m;
}

}  // namespace
}  // namespace azr::model
