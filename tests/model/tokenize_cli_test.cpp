// `azr tokenize` through the real binary, against the reference encodings made with Hugging
// Face's Rust tokenizer (../shared/models/qwen-tokenizer/reference_encodings.jsonl).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_support.h"

namespace {

using azr::testing::json_lines;
using azr::testing::run_process;
using nlohmann::json;

std::string azr() { return azr::testing::env_or_fail("AZR_BIN"); }
std::string tokenizer_dir() { return azr::testing::env_or_fail("AZR_SHARED_DIR") + "/models/qwen-tokenizer"; }

std::vector<json> reference() {
  std::ifstream in(tokenizer_dir() + "/reference_encodings.jsonl");
  std::vector<json> v;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(json::parse(line));
  return v;
}

TEST(TokenizeCli, JsonlEncodesEveryReferenceStringExactly) {
  auto ref = reference();
  ASSERT_EQ(ref.size(), 60u);
  std::string input;
  for (const auto& r : ref) input += json{{"text", r["text"]}}.dump() + "\n";
  auto out = run_process({azr(), "tokenize", "--tokenizer", tokenizer_dir(), "--jsonl", "-"}, input);
  ASSERT_EQ(out.exit_code, 0) << out.err;
  auto lines = json_lines(out.out);
  ASSERT_EQ(lines.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(lines[i]["ids"], ref[i]["ids"]) << ref[i]["name"];
}

TEST(TokenizeCli, DecodeInvertsEncode) {
  auto ref = reference();
  std::string input;
  for (const auto& r : ref) input += json{{"ids", r["ids"]}}.dump() + "\n";
  auto out = run_process({azr(), "tokenize", "--tokenizer", tokenizer_dir(), "--jsonl", "-", "--decode"}, input);
  ASSERT_EQ(out.exit_code, 0) << out.err;
  auto lines = json_lines(out.out);
  ASSERT_EQ(lines.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    // One reference line changes under NFC; its file records what decoding gives.
    json want = ref[i].contains("decoded") ? ref[i]["decoded"] : ref[i]["text"];
    EXPECT_EQ(lines[i]["text"], want) << ref[i]["name"];
  }
}

TEST(TokenizeCli, TextFlagAndTokenizerFileOrDirectory) {
  auto a = run_process({azr(), "tokenize", "--tokenizer", tokenizer_dir(), "--text", "Hello world"});
  auto b = run_process({azr(), "tokenize", "--tokenizer", tokenizer_dir() + "/tokenizer.json", "--text", "Hello world"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(json::parse(a.out)["ids"], json::array({9707, 1879}));  // reference line "hello_world"
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(json::parse(run_process({azr(), "tokenize", "--tokenizer", tokenizer_dir(), "--text", ""}).out)["ids"],
            json::array());
}

TEST(TokenizeCli, BadInputIsNamedAndPrintsNothing) {
  auto missing = run_process({azr(), "tokenize", "--tokenizer", "/nonexistent", "--text", "x"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent"), std::string::npos) << missing.err;
  auto bad = run_process({azr(), "tokenize", "--tokenizer", tokenizer_dir(), "--jsonl", "-"},
                         "{\"text\":\"fine\"}\n{\"txt\":\"oops\"}\n");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("<stdin>:2: field 'text' is missing"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.out, "");  // checked before anything is printed
  auto bad_ids = run_process({azr(), "tokenize", "--tokenizer", tokenizer_dir(), "--jsonl", "-", "--decode"},
                             "{\"ids\":[1,\"x\"]}\n");
  EXPECT_EQ(bad_ids.exit_code, 2);
  auto unknown_id = run_process({azr(), "tokenize", "--tokenizer", tokenizer_dir(), "--jsonl", "-", "--decode"},
                                "{\"ids\":[999999999]}\n");
  EXPECT_EQ(unknown_id.exit_code, 2);
  // Ids past 32 bits, and past 63: read as written. 2^32 + 100 decoded as id 100 ("d"), exit 0.
  for (const std::string id : {"4294967396", "18446744073709551615", "-1"}) {
    auto past = run_process({azr(), "tokenize", "--tokenizer", tokenizer_dir(), "--jsonl", "-", "--decode"},
                            "{\"ids\":[" + id + "]}\n");
    EXPECT_EQ(past.exit_code, 2) << id;
    EXPECT_NE(past.err.find("<stdin>:1: token id " + id + " is outside [0, "), std::string::npos) << past.err;
    EXPECT_EQ(past.out, "");
  }
  EXPECT_EQ(run_process({azr(), "tokenize", "--tokenizer", tokenizer_dir()}).exit_code, 2);  // no input
  // A directory without tokenizer.json was read as the file: "not valid JSON".
  const std::string empty_dir = ::testing::TempDir();
  auto no_file = run_process({azr(), "tokenize", "--tokenizer", empty_dir, "--text", "x"});
  EXPECT_EQ(no_file.exit_code, 2);
  EXPECT_NE(no_file.err.find(empty_dir + "/tokenizer.json: no tokenizer file"), std::string::npos)
      << no_file.err;
}

}  // namespace
