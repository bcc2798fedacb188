// Chat formatting against independent truth (../shared/models/qwen-tokenizer/
// reference_chat_renderings.jsonl: Qwen2.5's chat_template rendered by @huggingface/jinja and
// encoded by HF's Rust tokenizers, see SOURCE.md there), the R1 wrapper against the Absolute Zero
// reference's literal text, and the byte-level tokenizer with its tokenizer.json export.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "model/byte_tokenizer.h"
#include "model/chat_format.h"
#include "model/tokenizer.h"
#include "tests/test_support.h"

namespace {

using azr::model::BpeTokenizer;
using azr::model::ByteTokenizer;
using azr::model::ChatFormatError;
using azr::model::ChatMessage;
using azr::model::TokenizerError;
using json = nlohmann::json;
using namespace std::string_literals;

std::string shared_dir() { return azr::testing::env_or_fail("AZR_SHARED_DIR"); }

std::string qwen_dir() { return shared_dir() + "/models/qwen-tokenizer"; }

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

std::vector<ChatMessage> messages_of(const json& row) {
  std::vector<ChatMessage> out;
  for (const auto& m : row.at("messages"))
    out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  return out;
}

// A scratch file removed at scope exit.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name)
      : path((std::filesystem::temp_directory_path() /
              ("azr_chat_format_" + std::to_string(getpid()) + "_" + name))
                 .string()) {}
  ~TempFile() { std::filesystem::remove(path); }
};

// ---------------------------------------------------------------------------------------------
// ChatML

TEST(ChatML, ReferenceRenderingsExact) {
  const auto rows = read_jsonl(qwen_dir() + "/reference_chat_renderings.jsonl");
  ASSERT_EQ(rows.size(), 5u);
  for (const auto& row : rows) {
    SCOPED_TRACE(row.at("name").get<std::string>());
    EXPECT_EQ(azr::model::render_chatml(messages_of(row), row.at("add_generation_prompt").get<bool>()),
              row.at("rendered").get<std::string>());
  }
}

TEST(ChatML, ReferenceIdsExact) {
  const auto rows = read_jsonl(qwen_dir() + "/reference_chat_renderings.jsonl");
  ASSERT_EQ(rows.size(), 5u);
  const BpeTokenizer tok(qwen_dir() + "/tokenizer.json");
  for (const auto& row : rows) {
    SCOPED_TRACE(row.at("name").get<std::string>());
    const std::string text =
        azr::model::render_chatml(messages_of(row), row.at("add_generation_prompt").get<bool>());
    EXPECT_EQ(tok.encode(text), row.at("ids").get<std::vector<int32_t>>());
  }
}

TEST(ChatML, TemplateRules) {
  using azr::model::render_chatml;
  // Custom default system prompt; a later system message is rendered in place.
  EXPECT_EQ(render_chatml({{"user", "a"}, {"system", "s"}, {"assistant", ""}}, false, "D"),
            "<|im_start|>system\nD<|im_end|>\n<|im_start|>user\na<|im_end|>\n"
            "<|im_start|>system\ns<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n");
  // A lone leading system message is not repeated.
  EXPECT_EQ(render_chatml({{"system", "S"}}, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatML, BadConversationsRejected) {
  using azr::model::render_chatml;
  try {
    render_chatml({{"user", "a"}, {"bot", "b"}}, true);
    FAIL() << "unknown role accepted";
  } catch (const ChatFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown role 'bot'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("message 1"), std::string::npos) << e.what();
  }
  try {
    render_chatml({{"user", "a"}, {"tool", "{}"}}, true);
    FAIL() << "tool role accepted";
  } catch (const ChatFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
  }
  EXPECT_THROW(render_chatml({}, true), ChatFormatError);
  EXPECT_THROW(render_chatml({{"User", "a"}}, true), ChatFormatError);  // roles are case-sensitive
}

// ---------------------------------------------------------------------------------------------
// R1 wrapper

TEST(R1, MatchesReferenceTemplate) {
  // `instruction_following` in absolute_zero_reasoner/data_construction/process_data.py of the
  // Absolute Zero reference (as in the forks FFishy-git/Absolute-Zero-Reasoner@eb104242 and
  // kwon13/Absolute-Zero-Reasoner-verl-0.7.1@0f858aff; the research note cites L51), copied
  // literally; the Python code applies it with str.format(question).
  const std::string reference =
      "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
      "The assistant first thinks about the reasoning process in the mind and then provides the user with "
      "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
      "</answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here "
      "</answer>. User: {}\nAssistant: <think>";
  const std::string prompt = "Deduce the output of f({'a': 1}).\n```python\ndef f(x):\n    return x\n```";
  std::string expected = reference;
  expected.replace(expected.find("{}"), 2, prompt);
  EXPECT_EQ(azr::model::render_r1(prompt), expected);

  // The fragments research/azr-reference.md §3.1 quotes (its "…" elide the rest).
  const std::string r = azr::model::render_r1("P");
  EXPECT_EQ(r.rfind("A conversation between User and Assistant. ", 0), 0u);
  EXPECT_NE(r.find("enclosed within <think> </think> and <answer> </answer> tags"), std::string::npos);
  EXPECT_TRUE(r.ends_with("User: P\nAssistant: <think>"));
  // Braces in the prompt are text, as with Python's format().
  EXPECT_TRUE(azr::model::render_r1("{x}").ends_with("User: {x}\nAssistant: <think>"));
}

// ---------------------------------------------------------------------------------------------
// ByteTokenizer

std::string all_bytes() {
  std::string s;
  for (int b = 0; b < 256; ++b) s += static_cast<char>(b);
  return s;
}

TEST(ByteTokenizer, IdsAreBytes) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256u + 7u);
  const std::string s = all_bytes() + all_bytes();
  const auto ids = tok.encode(s);
  ASSERT_EQ(ids.size(), s.size());
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(s[i]));
  EXPECT_EQ(tok.decode_bytes(ids), s);
  EXPECT_EQ(tok.encode(""), std::vector<int32_t>{});
}

TEST(ByteTokenizer, RoundTripArbitraryBytes) {
  const ByteTokenizer tok;
  const std::vector<std::string> cases = {
      "\x80\xBF\xC0\xC1\xF5\xFF"s,  // never valid in UTF-8
      "\xE2\x82"s,                    // truncated 3-byte character
      "\xED\xA0\x80"s,                // surrogate
      "a\0b<|im_end"s,                // NUL, unfinished special
      "<think>\xF0\x9F\x98\x80</think>\xC3"s,
      "héllo wörld 你好 🎉",
  };
  for (const auto& s : cases) {
    EXPECT_EQ(tok.decode_bytes(tok.encode(s)), s);
  }
  std::mt19937 rng(12345);
  const auto specials = ByteTokenizer::default_special_tokens();
  for (int n = 0; n < 500; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 64);
    for (int i = 0; i < len; ++i) {
      if (rng() % 8 == 0) s += specials[rng() % specials.size()];
      else s += static_cast<char>(rng() % 256);
    }
    ASSERT_EQ(tok.decode_bytes(tok.encode(s)), s);
  }
  // decode() is lossy like HF: invalid UTF-8 becomes U+FFFD; valid UTF-8 round trips.
  EXPECT_EQ(tok.decode(tok.encode("a\xFF"s)), "a\xEF\xBF\xBD");
  EXPECT_EQ(tok.decode(tok.encode(cases.back())), cases.back());
}

TEST(ByteTokenizer, SpecialsMatchedLongestFirst) {
  const ByteTokenizer tok({"<a>", "<a>b", "</a>"});
  EXPECT_EQ(tok.encode("<a>b<a>c</a>"), (std::vector<int32_t>{257, 256, 'c', 258}));
  EXPECT_EQ(tok.encode("<a"), (std::vector<int32_t>{'<', 'a'}));
  const ByteTokenizer def;
  const auto ids = def.encode("<|im_start|>user\nhi<|im_end|><think>x</think><answer>y</answer><|endoftext|>");
  EXPECT_EQ(ids, (std::vector<int32_t>{257, 'u', 's', 'e', 'r', '\n', 'h', 'i', 258, 259, 'x', 260, 261,
                                       'y', 262, 256}));
  EXPECT_EQ(def.decode(ids, /*skip_special=*/true), "user\nhixy");
  EXPECT_EQ(def.token_to_id("<think>"), 259);
  EXPECT_EQ(def.token_to_id("\xC4\xA0"), 32);  // "Ġ" is the byte-level token of ' '
  EXPECT_EQ(def.id_to_token(32), "\xC4\xA0");
  EXPECT_EQ(def.id_to_token(262), "</answer>");
  EXPECT_EQ(def.id_to_token(263), std::nullopt);
  EXPECT_TRUE(def.is_special(256));
  EXPECT_FALSE(def.is_special(65));
  EXPECT_THROW(def.decode(std::vector<int32_t>{263}), TokenizerError);
  EXPECT_THROW(def.decode(std::vector<int32_t>{-1}), TokenizerError);
}

TEST(ByteTokenizer, BadSpecialsRejected) {
  try {
    ByteTokenizer tok({"<a>", ""});
    FAIL() << "empty special accepted";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
  }
  try {
    ByteTokenizer tok({"<a>", "<b>", "<a>"});
    FAIL() << "duplicate special accepted";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("duplicate special token '<a>'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ByteTokenizer({std::string("\xFF")}), TokenizerError);  // not valid UTF-8
}

// A varied valid-UTF-8 corpus (BpeTokenizer only takes valid UTF-8).
std::vector<std::string> corpus() {
  std::vector<std::string> out = {
      "",
      "hello world",
      "  leading and trailing  \n\n\t",
      "def f(x):\n    return x * 2  # comment\n",
      "<|im_start|>system\nYou are a bot.<|im_end|>\n<|im_start|>assistant\n<think>hm</think>",
      "<answer>42</answer><|endoftext|><|endoftext|>",
      "<think", "<|im_end", "<<think>>",
      "héllo wörld 你好 🎉 e\xCC\x81 \xC2\xA0 \xEF\xBB\xBF",
      "I'm don't they'll 123 4567 ...!!!",
  };
  const std::string all = all_bytes();
  out.push_back(all.substr(0, 128));  // all ASCII
  std::mt19937 rng(7);
  const std::vector<std::string> pieces = {"a", "Z", " ", "\n", "\t", "é", "ß", "中", "🎉", "'s", "0",
                                           "<think>", "</answer>", "<|im_start|>", "<", "|", ">", "\r\n"};
  for (int n = 0; n < 300; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) s += pieces[rng() % pieces.size()];
    out.push_back(s);
  }
  return out;
}

void expect_same_as_bpe(const ByteTokenizer& tok, const BpeTokenizer& bpe) {
  EXPECT_EQ(bpe.vocab_size(), tok.vocab_size());
  for (int32_t id = 0; id < static_cast<int32_t>(tok.vocab_size()); ++id) {
    EXPECT_EQ(bpe.id_to_token(id), tok.id_to_token(id)) << id;
    EXPECT_EQ(bpe.is_special(id), tok.is_special(id)) << id;
  }
  for (const auto& s : corpus()) {
    const auto ids = tok.encode(s);
    ASSERT_EQ(bpe.encode(s), ids) << s;
    EXPECT_EQ(bpe.decode(ids), tok.decode(ids)) << s;
    EXPECT_EQ(bpe.decode(ids, true), tok.decode(ids, true)) << s;
  }
  // Every byte on its own, decoded (lossily) the same way.
  for (int b = 0; b < 256; ++b) {
    const std::vector<int32_t> ids = {b};
    EXPECT_EQ(bpe.decode(ids), tok.decode(ids)) << b;
  }
}

TEST(ByteTokenizer, TokenizerJsonShape) {
  const ByteTokenizer tok;
  const json j = json::parse(tok.tokenizer_json());
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["vocab"].size(), 256u);
  EXPECT_EQ(j["model"]["vocab"]["\xC4\xA0"], 32);  // Ġ
  EXPECT_EQ(j["model"]["vocab"]["\xC4\x80"], 0);   // Ā
  EXPECT_EQ(j["model"]["vocab"]["!"], 33);
  EXPECT_TRUE(j["model"]["merges"].empty());
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
  EXPECT_EQ(j["pre_tokenizer"]["use_regex"], false);
  EXPECT_EQ(j["pre_tokenizer"]["add_prefix_space"], false);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
  ASSERT_EQ(j["added_tokens"].size(), 7u);
  EXPECT_EQ(j["added_tokens"][2]["content"], "<|im_end|>");
  EXPECT_EQ(j["added_tokens"][2]["id"], 258);
  EXPECT_EQ(j["added_tokens"][2]["special"], true);
}

TEST(ByteTokenizer, SavedJsonLoadsInBpeTokenizer) {
  const ByteTokenizer tok;
  // The HF-native form (use_regex false). azr's BpeTokenizer requires a pre-tokenizer regex at
  // present; if it still does, check that it says so, else compare.
  {
    TempFile f("noregex.json");
    tok.save_tokenizer_json(f.path);
    try {
      const BpeTokenizer bpe(f.path);
      expect_same_as_bpe(tok, bpe);
    } catch (const TokenizerError& e) {
      EXPECT_NE(std::string(e.what()).find("pre_tokenizer has no regex"), std::string::npos) << e.what();
    }
  }
  // use_regex true: the same ids (no merges), and accepted by BpeTokenizer.
  TempFile f("regex.json");
  tok.save_tokenizer_json(f.path, /*use_regex=*/true);
  const BpeTokenizer bpe(f.path);
  expect_same_as_bpe(tok, bpe);
  // Other special sets too.
  const ByteTokenizer custom({"<a>", "<a>b", "</a>", "<|x|>"});
  TempFile g("custom.json");
  custom.save_tokenizer_json(g.path, true);
  const BpeTokenizer bpe2(g.path);
  for (const std::string s : {"<a>b<a>c</a>", "<|x|><a", "x<|x|>y</a>b"}) EXPECT_EQ(bpe2.encode(s), custom.encode(s)) << s;
}

TEST(ByteTokenizer, SaveToBadPathFails) {
  const ByteTokenizer tok;
  EXPECT_THROW(tok.save_tokenizer_json("/nonexistent-dir/x/tokenizer.json"), TokenizerError);
}

}  // namespace
