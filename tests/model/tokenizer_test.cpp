// BpeTokenizer against independent truth: ids recorded from Hugging Face's Rust `tokenizers`
// (../shared/models/qwen-tokenizer, see SOURCE.md there), plus round trips, streaming decode and
// malformed tokenizer.json files.
#include "model/tokenizer.h"
#include "tests/test_support.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

using azr::model::BpeTokenizer;
using azr::model::StreamDecoder;
using azr::model::TokenizerError;
using json = nlohmann::json;

std::string shared_dir() { return azr::testing::env_or_fail("AZR_SHARED_DIR"); }

std::string qwen_dir() { return shared_dir() + "/models/qwen-tokenizer"; }

std::vector<json> read_jsonl(const std::string& path, size_t limit = SIZE_MAX) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::vector<json> rows;
  for (std::string line; rows.size() < limit && std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

bool is_valid_utf8(const std::string& s) { return azr::model::valid_utf8_prefix(s) == s.size(); }

class QwenTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = std::make_unique<BpeTokenizer>(qwen_dir() + "/tokenizer.json"); }
  static void TearDownTestSuite() { tok_.reset(); }
  static const BpeTokenizer& tok() { return *tok_; }

  // Feeds ids one at a time; every emitted chunk must be valid UTF-8 on its own.
  static std::string stream(const std::vector<int32_t>& ids) {
    StreamDecoder dec(tok());
    std::string out;
    for (int32_t id : ids) {
      const std::string piece = dec.push(id);
      EXPECT_TRUE(is_valid_utf8(piece)) << "broken UTF-8 emitted after id " << id;
      out += piece;
    }
    const std::string tail = dec.flush();
    EXPECT_TRUE(is_valid_utf8(tail));
    return out + tail;
  }

  static std::unique_ptr<BpeTokenizer> tok_;
};
std::unique_ptr<BpeTokenizer> QwenTokenizer::tok_;

TEST_F(QwenTokenizer, VocabularyAndAddedTokens) {
  EXPECT_EQ(tok().vocab_size(), 151665u);
  EXPECT_EQ(tok().token_to_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tok().token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok().token_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok().token_to_id("<|file_sep|>"), 151664);
  EXPECT_EQ(tok().token_to_id("Ġworld"), 1879);
  EXPECT_FALSE(tok().token_to_id("<think>").has_value());  // plain text in Qwen2.5
  EXPECT_EQ(tok().id_to_token(1879), "Ġworld");
  EXPECT_EQ(tok().id_to_token(151645), "<|im_end|>");
  EXPECT_FALSE(tok().id_to_token(151665).has_value());
  EXPECT_FALSE(tok().id_to_token(-1).has_value());
  EXPECT_EQ(tok().added_tokens().size(), 22u);
  const auto special = tok().special_token_ids();
  EXPECT_EQ(special.size(), 14u);  // 151643..151656
  EXPECT_TRUE(tok().is_special(151645));
  EXPECT_FALSE(tok().is_special(151657));  // <tool_call> is added but not special
}

TEST_F(QwenTokenizer, ReferenceEncodingsExact) {
  const auto rows = read_jsonl(qwen_dir() + "/reference_encodings.jsonl");
  ASSERT_EQ(rows.size(), 60u);
  size_t matched = 0;
  for (const auto& r : rows) {
    const std::string text = r["text"];
    const auto ids = tok().encode(text);
    std::vector<std::string> tokens;
    for (int32_t id : ids) tokens.emplace_back(tok().id_to_token(id).value_or("?"));
    const bool ok = ids == r["ids"].get<std::vector<int32_t>>() && tokens == r["tokens"].get<std::vector<std::string>>();
    EXPECT_TRUE(ok) << "line " << r["idx"] << " (" << r["name"] << ")";
    matched += ok;
    // decode(encode(s)) == s, except where NFC changed the text (recorded as "decoded").
    EXPECT_EQ(tok().decode(ids), r.value("decoded", text)) << r["name"];
    EXPECT_EQ(stream(ids), r.value("decoded", text)) << r["name"];
  }
  EXPECT_EQ(matched, 60u);
}

TEST_F(QwenTokenizer, LlamaCppVectorsExact) {
  const auto rows = read_jsonl(qwen_dir() + "/llamacpp_qwen2_vectors.jsonl");
  ASSERT_EQ(rows.size(), 46u);
  size_t matched = 0;
  for (const auto& r : rows) {
    const std::string text = r["text"];
    const auto ids = tok().encode(text);
    const bool ok = ids == r["ids"].get<std::vector<int32_t>>();
    EXPECT_TRUE(ok) << "line " << r["idx"] << ": " << text;
    matched += ok;
    EXPECT_EQ(tok().decode(ids), text);
    EXPECT_EQ(stream(ids), text);
  }
  EXPECT_EQ(matched, 46u);
}

TEST_F(QwenTokenizer, ChatRenderingsExact) {
  const auto rows = read_jsonl(qwen_dir() + "/reference_chat_renderings.jsonl");
  ASSERT_EQ(rows.size(), 5u);
  for (const auto& r : rows) {
    const std::string rendered = r["rendered"];
    const auto ids = tok().encode(rendered);
    EXPECT_EQ(ids, r["ids"].get<std::vector<int32_t>>()) << r["name"];
    EXPECT_EQ(tok().decode(ids), rendered);
    EXPECT_EQ(stream(ids), rendered);
  }
}

// Edge cases where PCRE2/utf8proc and the Rust engine differ out of the box: letters and digits
// new in Unicode 15-16 (Rust knows them, PCRE2 10.42 does not; Unicode 17 ones Rust does not
// know), combining marks newer than the Rust NFC tables, U+0085 and other White_Space subtleties,
// and case folding in the contractions. Ids from HF `tokenizers@0.23.2` (npm, Rust engine) on
// this tokenizer.json, recorded with the command in the qwen-tokenizer SOURCE.md.
TEST_F(QwenTokenizer, RustEngineEdgeCases) {
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"a\U00013F06\u094D\u0939 x\U000105C0y \U00031350\U00031351",
       {64, 124373, 120, 228, 30484, 117, 856, 123934, 245, 222, 88, 220, 172, 109, 235, 238, 172, 109, 235, 239}},
      {"n\U00016D70\U00016D717", {77, 125427, 113, 108, 125427, 113, 109, 22}},
      {"a\U00010940b \U000323B0", {64, 123934, 98, 222, 65, 220, 172, 110, 236, 108}},
      {"a.\u0006\u0364\u1DF7'K e\u0301\u0364\u1DF7 \U00011935\U00011930",
       {64, 13, 194, 137, 97, 157, 115, 115, 6, 42, 3958, 137, 97, 157, 115, 115, 220, 128240, 97, 113, 128240, 97, 108}},
      {"a\u0085\u0085b\u180E c\u2029\u2029 d\u001C\u001F e\u200B\u200B f",
       {64, 126, 227, 126, 227, 65, 123970, 236, 272, 378, 102, 378, 102, 294, 216, 219, 384, 87896, 282}},
      {"it'\u017F HE'LL we'\u212A", {275, 6, 144815, 11685, 6, 4086, 582, 6, 42}},
      // Unicode 16 compositions and marks the Rust NFC does not know (a newer utf8proc would).
      {"a\U000105D2\u0307 \U00016D67\U00016D67 z\u0307 a\U0001E5EE\u0334",
       {64, 123934, 245, 240, 136, 229, 220, 125427, 113, 100, 125427, 113, 100, 46053, 264, 172, 252, 245, 106, 136, 112}},
  };
  for (const auto& [text, ids] : cases) EXPECT_EQ(tok().encode(text), ids) << text;
}

TEST_F(QwenTokenizer, RoundTripsExtraStrings) {
  std::vector<std::string> texts = {
      "Mixed: English, Русский, 中文, العربية, हिन्दी, 日本語, 한국어, ไทย",
      "Emoji 👩🏽‍💻🧑‍🤝‍🧑🏳️‍🌈 and flags 🇩🇪🇫🇷 end",
      "Combining: q\u0301 q\u0323\u0301 \u1e9b\u0323 \u0915\u094d\u0937 (NFC already, so it survives)",
      "runs:  \t\t \n\n\r\n   \u3000\u3000 \u00a0\u00a0x\u2003\u2003y",
      "digits 12345678901234567890123456789012345678901234567890",
      std::string(1000, ' ') + "x" + std::string(777, '\n'),
      "<|im_start|><|im_start|><|im_end|><|endoftext|>text<|fim_pad|>",
      "<|im_start <|im_end| |>",
      "\x01\x02\x7f \xc2\x80 \xc2\xa0 \xc2\xad",  // control and invisible characters
  };
  for (const auto& row : read_jsonl(shared_dir() + "/benchmarks/cruxeval/cruxeval.jsonl", 200))
    texts.push_back(row["code"]);
  ASSERT_GE(texts.size(), 209u);
  for (const auto& t : texts) {
    const auto ids = tok().encode(t);
    EXPECT_EQ(tok().decode(ids), t);
    EXPECT_EQ(stream(ids), t);
  }
}

TEST_F(QwenTokenizer, NfcIsApplied) {
  // "é" decomposed and composed encode the same; decode gives the composed form.
  EXPECT_EQ(tok().encode("e\u0301"), tok().encode("\u00e9"));
  EXPECT_EQ(tok().decode(tok().encode("e\u0301")), "\u00e9");
}

// The space, letter and newline runs are each one pre-token of up to a million bytes: a merge loop
// quadratic in a word's length would take hours here (ctest's timeout, a failure), the linear one
// a second. The digits split one a token: a long input, not a long word. Exact: each decodes to
// itself.
TEST_F(QwenTokenizer, LongRunsAreLinearAndExact) {
  for (const std::string& t : {std::string(1000000, ' '), std::string(1000000, 'a'), std::string(500000, '7'),
                               std::string(300000, '\n') + "end"}) {
    const auto ids = tok().encode(t);
    EXPECT_EQ(tok().decode(ids), t);
  }
  // Digits split one per token.
  EXPECT_EQ(tok().encode("2024").size(), 4u);
}

TEST_F(QwenTokenizer, RejectsInvalidUtf8AndUnknownIds) {
  EXPECT_THROW(tok().encode("ab\xff"), TokenizerError);
  EXPECT_THROW(tok().encode("\xe4\xb8"), TokenizerError);
  const std::vector<int32_t> bad = {151665};
  EXPECT_THROW(tok().decode(bad), TokenizerError);
}

TEST_F(QwenTokenizer, SkipSpecialTokens) {
  const auto ids = tok().encode("<|im_start|>user\nhi<|im_end|><tool_call>");
  EXPECT_EQ(tok().decode(ids, true), "user\nhi<tool_call>");
}

TEST_F(QwenTokenizer, StreamingHoldsPartialCharacters) {
  // 𠀋 (U+2000B, 4 bytes) is split over several byte-level tokens: nothing may come out until
  // the last.
  const auto ids = tok().encode("𠀋");
  ASSERT_GT(ids.size(), 1u);
  StreamDecoder dec(tok());
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(dec.push(ids[i]), "");
  EXPECT_EQ(dec.push(ids.back()), "𠀋");
  EXPECT_EQ(dec.flush(), "");
  // An unfinished character at the end is flushed as U+FFFD, never as raw bytes.
  StreamDecoder cut(tok());
  EXPECT_EQ(cut.push(ids[0]), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
}

// Qwen3's tokenizer.json: the same BPE with merges as ["a", "b"] arrays and four more added
// tokens (<think> etc.), so two reference lines have other ids ("ids_qwen3_tokenizer").
TEST(Qwen3Tokenizer, ReferenceEncodingsExact) {
  const BpeTokenizer tok(shared_dir() + "/models/qwen3-tokenizer/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 151669u);
  EXPECT_EQ(tok.token_to_id("<think>"), 151667);
  size_t matched = 0;
  for (const auto& r : read_jsonl(qwen_dir() + "/reference_encodings.jsonl")) {
    const auto expected = r.value("ids_qwen3_tokenizer", r["ids"]).get<std::vector<int32_t>>();
    const auto ids = tok.encode(r["text"].get<std::string>());
    EXPECT_EQ(ids, expected) << r["name"];
    matched += ids == expected;
  }
  EXPECT_EQ(matched, 60u);
}

TEST(Utf8Lossy, MaximalSubpartReplacement) {
  using azr::model::utf8_lossy;
  EXPECT_EQ(utf8_lossy("ok"), "ok");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x8D"), "\xEF\xBF\xBD");                   // truncated 4-byte
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");           // overlong
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8_lossy("a\xE4\xB8x"), "a\xEF\xBF\xBDx");
}

// --- malformed tokenizer.json files --------------------------------------------------------

class BadTokenizerFile : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& content) {
    const auto dir = std::filesystem::temp_directory_path() / ("azr_tok_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    dirs_.push_back(dir);
    const auto path = (dir / name).string();
    std::ofstream(path) << content;
    return path;
  }
  // Loads `path` and returns the error message ("" if it loaded).
  static std::string load_error(const std::string& path) {
    try {
      BpeTokenizer t(path);
    } catch (const TokenizerError& e) {
      return e.what();
    }
    return "";
  }
  void TearDown() override {
    for (const auto& d : dirs_) std::filesystem::remove_all(d);
  }
  std::vector<std::filesystem::path> dirs_;
};

// A minimal valid byte-level BPE tokenizer.json to break one field at a time.
json tiny_tokenizer() {
  json vocab = json::object();
  // bytes_to_unicode, written out so the test does not share the library's table.
  int next = 256, id = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab[s] = id++;
  }
  vocab["ab"] = id++;
  vocab["Ġab"] = id++;
  return json{{"normalizer", {{"type", "NFC"}}},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers",
                 json::array({{{"type", "Split"},
                               {"pattern", {{"Regex", R"( ?\p{L}+|\s+(?!\S)|\s+|[^\s\p{L}]+)"}}},
                               {"behavior", "Isolated"},
                               {"invert", false}},
                              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"added_tokens",
               json::array({{{"id", id}, {"content", "<s>"}, {"special", true}, {"lstrip", true}, {"rstrip", true},
                             {"normalized", false}, {"single_word", false}}})},
              {"model",
               {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", json::array({json::array({"a", "b"}), "Ġ ab"})}}}};  // both merge forms
}

TEST_F(BadTokenizerFile, TinyTokenizerLoadsAndEncodes) {
  BpeTokenizer t(write("tiny.json", tiny_tokenizer().dump()));
  EXPECT_EQ(t.vocab_size(), 259u);
  // "Ġ ab" needs "ab" first: rank order. lstrip/rstrip: the spaces around <s> are swallowed.
  EXPECT_EQ(t.encode(" ab"), (std::vector<int32_t>{257}));
  EXPECT_EQ(t.encode("ab  <s>  ab"), (std::vector<int32_t>{256, 258, 256}));
  EXPECT_EQ(t.decode(t.encode("x ab ab")), "x ab ab");
}

TEST_F(BadTokenizerFile, TinyTokenizerIgnoreMergesAndSingleWord) {
  json j = tiny_tokenizer();
  j["model"]["vocab"]["xyz"] = 260;  // reachable only through ignore_merges: no merge builds it
  j["added_tokens"][0]["lstrip"] = false;
  j["added_tokens"][0]["rstrip"] = false;
  j["added_tokens"][0]["single_word"] = true;
  {
    BpeTokenizer t(write("plain.json", j.dump()));
    EXPECT_EQ(t.encode("xyz"), (std::vector<int32_t>{'x', 'y', 'z'}));  // tiny ids = byte values
    // single_word: <s> touching a word character stays text.
    EXPECT_EQ(t.encode("<s> ab"), (std::vector<int32_t>{258, 257}));
    EXPECT_NE(t.encode("x<s>").back(), 258);
  }
  j["model"]["ignore_merges"] = true;
  BpeTokenizer t(write("ignore.json", j.dump()));
  EXPECT_EQ(t.encode("xyz"), (std::vector<int32_t>{260}));
  EXPECT_EQ(t.encode(" ab"), (std::vector<int32_t>{257}));  // "Ġab" is in the vocab as a whole
}

TEST_F(BadTokenizerFile, MissingFile) {
  const std::string err = load_error("/nonexistent/azr/tokenizer.json");
  EXPECT_NE(err.find("/nonexistent/azr/tokenizer.json"), std::string::npos) << err;
  EXPECT_NE(err.find("cannot open"), std::string::npos) << err;
}

TEST_F(BadTokenizerFile, NotJson) {
  const auto path = write("bad.json", "{\"model\": [1, 2");
  const std::string err = load_error(path);
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("not valid JSON"), std::string::npos) << err;
}

// A normalizer 200,000 levels deep: copying it recursed once per level and overflowed the stack.
// Refused at 64 levels, naming the file; and a path that names an endless file (/dev/zero) is
// refused at 256 MiB instead of filling memory.
TEST_F(BadTokenizerFile, DeepNestingAndEndlessFilesAreRefused) {
  json j = tiny_tokenizer();
  std::string text = j.dump();
  text.insert(1, "\"normalizer\": " + std::string(200000, '[') + std::string(200000, ']') + ", ");
  const auto path = write("deep.json", text);
  std::string err = load_error(path);
  EXPECT_NE(err.find(path + ": nests deeper than 64 levels"), std::string::npos) << err;
  err = load_error("/dev/zero");
  EXPECT_NE(err.find("/dev/zero: is larger than 256 MiB"), std::string::npos) << err;
}

// Ids are whole numbers below 2n + 256 for n tokens (n = 259 here, 258 in the vocabulary and the
// added one: 774)
// and no two vocabulary entries share one. 4294967393 was read as 97 ('a'), aliasing an added
// token with a byte; 300000000 made a table of 300 million entries from a 5 KB file.
TEST_F(BadTokenizerFile, IdsAreBoundedAndDistinct) {
  const auto error_with = [&](const std::function<void(json&)>& change) {
    json j = tiny_tokenizer();
    change(j);
    return load_error(write("ids.json", j.dump()));
  };
  const auto added = [](json id) {
    return [id](json& j) {
      j["added_tokens"] = json::array({{{"id", id}, {"content", "<x>"}, {"special", true}}});
    };
  };
  for (const json& id : {json(4294967393u), json(300000000), json(-1), json(774), json(1.5)}) {
    const std::string err = error_with(added(id));
    EXPECT_NE(err.find("id " + id.dump() + " of field added_tokens is not a whole number in [0, 774)"),
              std::string::npos)
        << err;
  }
  EXPECT_EQ(error_with(added(773)), "");  // the last id below the bound
  std::string err = error_with([](json& j) { j["model"]["vocab"]["ab"] = 3000000000u; });
  EXPECT_NE(err.find("id 3000000000 of 'ab' (field model.vocab)"), std::string::npos) << err;
  err = error_with([](json& j) { j["model"]["vocab"]["ab"] = j["model"]["vocab"]["Ġab"]; });
  EXPECT_NE(err.find("have the same id 257 (field model.vocab)"), std::string::npos) << err;
}

// A value of the wrong JSON type is named by its field, without nlohmann's tag: "malformed field:
// [json.exception.type_error.302] type must be string, but is number" named neither.
TEST_F(BadTokenizerFile, AValueOfTheWrongTypeIsNamedByItsField) {
  const auto error_with = [&](const std::function<void(json&)>& change) {
    json j = tiny_tokenizer();
    change(j);
    const std::string path = write("types.json", j.dump());
    const std::string err = load_error(path);
    return err.rfind(path + ": ", 0) == 0 ? err.substr(path.size() + 2) : err;
  };
  EXPECT_EQ(error_with([](json& j) { j["added_tokens"][0]["content"] = 5; }),
            "malformed field added_tokens[0]: type must be string, but is number");
  EXPECT_EQ(error_with([](json& j) { j["model"]["merges"][0] = json::array({"a", 2}); }),
            "malformed field model.merges[0]: type must be string, but is number");
  EXPECT_EQ(error_with([](json& j) { j["model"]["end_of_word_suffix"] = 1; }),
            "malformed field model: type must be string, but is number");
}

TEST_F(BadTokenizerFile, MissingModel) {
  json j = tiny_tokenizer();
  j.erase("model");
  const std::string err = load_error(write("nomodel.json", j.dump()));
  EXPECT_NE(err.find("missing field model"), std::string::npos) << err;
}

TEST_F(BadTokenizerFile, UnsupportedPieces) {
  struct Case {
    const char* name;
    std::function<void(json&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"wordpiece", [](json& j) { j["model"]["type"] = "WordPiece"; }, "unsupported model type 'WordPiece'"},
      {"novocab", [](json& j) { j["model"].erase("vocab"); }, "model.vocab"},
      {"nomerges", [](json& j) { j["model"].erase("merges"); }, "model.merges"},
      {"badmerge", [](json& j) { j["model"]["merges"].push_back("x zz"); }, "merge 2"},
      {"normalizer", [](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer"},
      {"pretok", [](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer"},
      {"badregex", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(["; },
       "does not compile"},
      {"decoder", [](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder"},
      {"wrongtype", [](json& j) { j["model"]["vocab"]["ab"] = "x"; },
       "id \"x\" of 'ab' (field model.vocab) is not a whole number"},
  };
  for (const auto& c : cases) {
    json j = tiny_tokenizer();
    c.edit(j);
    const auto path = write(std::string(c.name) + ".json", j.dump());
    const std::string err = load_error(path);
    EXPECT_NE(err.find(path), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
  }
}

}  // namespace
