// The hand-written response corpus (fixtures/parse/NAME.txt + NAME.json) through the proposer
// parser and the solver extraction. Each NAME.txt is a raw generation: what the model wrote
// after the prompt's "<think>". NAME.json holds the expected outcome, derived by hand:
//   {"kind": "proposer"|"solver", "type": "deduction"|"abduction"|"induction",
//    proposer: "ok", "reason", optional "detail", "program", "input", "inputs", "message",
//              induction: "prompt_program" (the program the prompt showed), optional "num_inputs";
//    solver:   "format_ok", "reason", "answer", optional "source"}
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "proposer/fenced_blocks.h"
#include "proposer/import_scan.h"
#include "proposer/parse.h"
#include "solver/extract.h"

namespace fs = std::filesystem;
using azr::buffer::TaskType;
using nlohmann::json;

namespace {

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The corpus is listed when the suite is instantiated, which gtest_discover_tests does at build
// time without ctest's environment, so its path is compiled in (AZR_TASK_FIXTURES).
fs::path fixture_dir() { return AZR_TASK_FIXTURES; }

std::vector<std::string> case_names() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fixture_dir()))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

TaskType type_of(const json& j) { return *azr::buffer::parse_type(j.at("type").get<std::string>()); }

class ParseFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ParseFixture, MatchesHandWrittenExpectation) {
  const fs::path dir = fixture_dir();
  const json want = json::parse(read(dir / (GetParam() + ".json")));
  const std::string response = read(dir / (GetParam() + ".txt"));
  ASSERT_FALSE(response.empty()) << GetParam();
  const TaskType type = type_of(want);

  if (want.at("kind") == "proposer") {
    azr::proposer::ParseOptions opt;
    if (want.contains("num_inputs")) opt.num_inputs = want["num_inputs"];
    if (want.contains("reference_pitfall")) opt.reference_code_block_pitfall = want["reference_pitfall"];
    auto r = type == TaskType::Induction
                 ? azr::proposer::parse_induction_proposal(response, want.value("prompt_program", ""), opt)
                 : azr::proposer::parse_code_proposal(type, response, opt);
    EXPECT_EQ(r.check.reason, want.at("reason").get<std::string>()) << r.check.detail;
    EXPECT_EQ(r.check.ok, want.at("ok").get<bool>());
    EXPECT_EQ(r.proposal.type, type);
    if (want.contains("detail")) {
      EXPECT_EQ(r.check.detail, want["detail"].get<std::string>());
    }
    if (want.contains("program")) {
      EXPECT_EQ(r.proposal.program, want["program"].get<std::string>());
    }
    if (want.contains("input")) {
      EXPECT_EQ(r.proposal.input, want["input"].get<std::string>());
    }
    if (want.contains("inputs")) {
      EXPECT_EQ(r.proposal.inputs, want["inputs"].get<std::vector<std::string>>());
    }
    if (want.contains("message")) {
      EXPECT_EQ(r.proposal.message, want["message"].get<std::string>());
    }
  } else {
    auto e = azr::solver::extract_answer(type, response);
    EXPECT_EQ(e.reason, want.at("reason").get<std::string>());
    EXPECT_EQ(e.format_ok, want.at("format_ok").get<bool>());
    if (want.contains("answer")) {
      EXPECT_EQ(e.answer, want["answer"].get<std::string>());
    }
    if (want.contains("source")) {
      EXPECT_EQ(e.source, want["source"].get<std::string>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, ParseFixture, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

TEST(ParseCorpus, HasAtLeastFortyCases) { EXPECT_GE(case_names().size(), 40u); }

// The fallback fields both parsers share: values in order, empty ones skipped, a marker on the
// next line starting its own match, tags in any case; a field with no pattern is refused.
TEST(FieldFallbacks, CommentAndTagValuesInOrder) {
  using azr::proposer::comment_values;
  using azr::proposer::tag_values;
  EXPECT_EQ(comment_values("# Output:\n# output: 5\n  #OUTPUT : [1]\n", "output"),
            (std::vector<std::string>{"# output: 5", "5", "[1]"}));
  EXPECT_EQ(comment_values("# Input:\n\n", "input"), std::vector<std::string>{});
  EXPECT_EQ(tag_values("<MESSAGE> a </message> <message></message> <message>b\nc</message>", "message"),
            (std::vector<std::string>{"a", "b\nc"}));
  EXPECT_THROW(comment_values("# Program: x", "program"), std::invalid_argument);
}

// Direct checks of the import pre-filter on forms that need no whole response around them.
TEST(ImportScan, IgnoresStringsAndComments) {
  const auto banned = azr::proposer::default_banned_words();
  EXPECT_FALSE(azr::proposer::find_banned_import("def f(x):\n    # import time\n    return 'import random'\n", banned));
  EXPECT_FALSE(azr::proposer::find_banned_import("s = '''\nimport os, time\n'''\ndef f(x):\n    return s\n", banned));
  EXPECT_FALSE(azr::proposer::find_banned_import("import os\nimport collections.abc as c\ndef f(x):\n    return x\n", banned));
  EXPECT_FALSE(azr::proposer::find_banned_import("from timeit import x\nimport times\n", banned));
}

TEST(ImportScan, FindsEveryStatementForm) {
  const auto banned = azr::proposer::default_banned_words();
  struct Case { const char* code; const char* module; };
  for (auto c : std::initializer_list<Case>{
           {"import time\n", "time"},
           {"import os.time\n", "os.time"},
           {"import random as rnd\n", "random"},
           {"from hashlib import sha256\n", "hashlib"},
           {"from a.threading import Thread\n", "a.threading"},
           {"from os import time\n", "time"},
           {"import os, sys, random\n", "random"},
           {"from collections import (\n    deque,\n    time as t,\n)\n", "time"},
           {"import os, \\\n    logging\n", "logging"},
           {"x = 1; import calendar\n", "calendar"},
           {"def f(x):\n    if x: import hmac\n    return x\n", "hmac"},
           {"from . import random\n", "random"},
           {"from ..datetime import date\n", "..datetime"},
           {"m = __import__('os')\n", "__import__"},
           {"import importlib\n", "importlib"},
       }) {
    auto b = azr::proposer::find_banned_import(c.code, banned);
    ASSERT_TRUE(b.has_value()) << c.code;
    EXPECT_EQ(b->module, c.module) << c.code;
  }
}

}  // namespace
