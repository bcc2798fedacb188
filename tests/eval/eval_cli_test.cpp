// `azr eval` through the real binary and the real zygote: every benchmark's gold answers score
// 100.0 and systematically wrong ones 0.0; bad answer files exit 2 naming FILE:LINE; --model runs
// end to end on a random azr-tiny model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <tuple>

#include "eval/benchmarks.h"
#include "eval/prompts.h"
#include "model/byte_tokenizer.h"
#include "model/presets.h"
#include "model/transformer.h"
#include "tests/eval/bigram_model.h"
#include "tests/test_support.h"

namespace {

using azr::testing::env_or_fail;
using azr::testing::run_process;
using nlohmann::json;
namespace fs = std::filesystem;
using namespace azr::eval;

class EvalCli : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = env_or_fail("AZR_BIN");
    data_ = env_or_fail("AZR_SHARED_DIR") + "/benchmarks";
    dir_ = fs::temp_directory_path() / ("azr_eval_cli_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

  static std::string wrong_response(const Benchmark& b) {
    if (b.info.name == "cruxeval_o") return "'azr: not the output'";
    if (b.info.name == "cruxeval_i") return "1 / 0";  // an expression that raises
    if (b.info.category == Category::Code) return "```python\ndef azr_not_the_entry_point():\n    return None\n```";
    return "\\boxed{\\text{azr wrong}}";
  }

  std::string bin_, data_;
  fs::path dir_;
};

std::map<std::string, json> by_bench(const json& summary) {
  std::map<std::string, json> m;
  for (const auto& b : summary["benchmarks"]) m[b["bench"].get<std::string>()] = b;
  return m;
}

// Every item of every math benchmark, and the first 15 of every benchmark graded in the sandbox
// (CRUXEval both ways, HumanEval(+), MBPP(+)): this test is about the CLI around the graders, and
// each of those benchmarks is graded in full, gold and wrong, through the same graders elsewhere
// (grade_test: CRUXEval's 800 in both directions and in the expression mode eval uses;
// code_bench_test: the four code benchmarks). All of them here was 200 s of CI's 960; 15 stops
// short of HumanEval/15, whose canonical solution returns 147 MB over its plus inputs.
constexpr size_t kSandboxItems = 15;

TEST_F(EvalCli, GoldAnswersScoreFullAndWrongAnswersZeroOnEveryBenchmark) {
  std::string gold, wrong;
  std::map<std::string, size_t> counts;
  for (const auto& info : benchmark_registry()) {
    Benchmark b = load_benchmark(info.name, data_);
    if (info.category == Category::Code || info.category == Category::Cruxeval)
      b.items.resize(std::min(b.items.size(), kSandboxItems));
    counts[info.name] = b.items.size();
    for (const auto& it : b.items) {
      gold += json{{"bench", info.name}, {"id", it.id}, {"response", gold_response(b, it)}}.dump() + "\n";
      wrong += json{{"bench", info.name}, {"id", it.id}, {"response", wrong_response(b)}}.dump() + "\n";
    }
  }
  for (bool is_gold : {true, false}) {
    std::string answers = write(is_gold ? "gold.jsonl" : "wrong.jsonl", is_gold ? gold : wrong);
    std::string out = (dir_ / "results.jsonl").string();
    // 20 s of CPU per job, not the default 5: Mbpp/123's canonical solution takes 2-3 s, and a
    // slow or busy machine must not turn a gold answer into a timeout.
    auto r = run_process(
        {bin_, "eval", "--answers", answers, "--data", data_, "--json", "--out", out, "--timeout", "20"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json s = json::parse(r.out);
    auto m = by_bench(s);
    ASSERT_EQ(m.size(), 13u) << r.out;
    for (const auto& [name, n] : counts) {
      EXPECT_EQ(m[name]["items"], n) << name;
      EXPECT_EQ(m[name]["pass@1"], is_gold ? 100.0 : 0.0) << (is_gold ? "gold " : "wrong ") << name;
    }
    EXPECT_EQ(s["code_avg"], is_gold ? 100.0 : 0.0);
    EXPECT_EQ(s["math_avg"], is_gold ? 100.0 : 0.0);
    EXPECT_EQ(s["overall"], is_gold ? 100.0 : 0.0);
    // The per-response file: one line per answer, failures named.
    std::ifstream in(out);
    std::string line;
    size_t lines = 0, shown = 0;
    while (std::getline(in, line)) {
      json j = json::parse(line);
      lines++;
      EXPECT_EQ(j["correct"], is_gold);
      if (j["correct"] != is_gold && shown++ < 20) ADD_FAILURE() << line.substr(0, 600);
      for (const char* f : {"bench", "id", "sample", "response", "extracted", "reason"}) EXPECT_TRUE(j.contains(f)) << f;
    }
    size_t total = 0;
    for (auto& [_, n] : counts) total += n;
    EXPECT_EQ(lines, total);
  }
}

// CRUXEval-O answers are checked by CRUXEval's own text, the program then `assert <output> ==
// <answer>`: any expression goes, a top-level comma is the assert's message or a syntax error, and
// the answer that contains the call f(<input>) is wrong, by CRUXEval's rule. The truth, by hand
// from Python's semantics: sample_0's output is [(4, 1), (4, 1), (4, 1), (4, 1), (2, 3), (2, 3)]
// on [1, 1, 3, 1, 3, 1].
TEST_F(EvalCli, CruxevalOutputAnswersAreCheckedAsCruxevalChecksThem) {
  const std::vector<std::tuple<std::string, bool, std::string>> answers = {
      {"[(4, 1)] * 4 + [(2, 3)] * 2", true, "ok"},
      {"sorted([(2, 3), (4, 1)] * 3)[::-1][:4] + [(2, 3)] * 2", false, "wrong"},  // three (4, 1)s
      {"[(4, 1)] * 4 + [(2, 3), (3, 2)]", false, "wrong"},
      {"[(4, 1)] * 4 + [(2, 3)] * 2, 'the message'", true, "ok"},  // assert o == x, 'the message'
      {"[(4, 1)], [(2, 3)], 1", false, "syntax_error"},
      {"f([1, 1, 3, 1, 3, 1])", false, "calls_f"},       // the call itself
      {"f([1, 1, 3, 1, 3, 1])[:]", false, "calls_f"},    // still the call
      {"[(4, 1)] * 4 + [(2, 3)] * (1 / 0)", false, "exception"},
      {"[(4, 1)] * 4 + [(2, 3)] * 2\nx = 1", true, "ok"},             // module level: a second line
      {"[(4, 1)] * 4 + [(2, 3)] * 2\n    x = 1", false, "syntax_error"},  // an indented one
  };
  std::string text;
  for (const auto& [a, correct, reason] : answers)
    text += json{{"bench", "cruxeval_o"}, {"id", "sample_0"}, {"response", a}}.dump() + "\n";
  std::string out = (dir_ / "responses.jsonl").string();
  auto r = run_process({bin_, "eval", "--answers", write("a.jsonl", text), "--data", data_, "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  std::string line;
  size_t k = 0;
  for (; std::getline(in, line); ++k) {
    json j = json::parse(line);
    ASSERT_LT(k, answers.size());
    EXPECT_EQ(j["correct"], std::get<1>(answers[k])) << line;
    EXPECT_EQ(j["reason"], std::get<2>(answers[k])) << line;
  }
  EXPECT_EQ(k, answers.size());
}

TEST_F(EvalCli, TableAndPassAtK) {
  // cruxeval_o item sample_0 with 3 samples, 1 correct; sample_1 with 3, 0 correct.
  const std::string gold0 = "[(4, 1), (4, 1), (4, 1), (4, 1), (2, 3), (2, 3)]";
  std::string text;
  for (const char* r : {"0", "1", "2"}) text += json{{"bench", "cruxeval_o"}, {"id", "sample_1"}, {"response", r}}.dump() + "\n";
  text += json{{"bench", "cruxeval_o"}, {"id", "sample_0"}, {"response", gold0}}.dump() + "\n";
  text += json{{"bench", "cruxeval_o"}, {"id", "sample_0"}, {"response", "[]"}}.dump() + "\n";
  text += json{{"bench", "cruxeval_o"}, {"id", "sample_0"}, {"response", "x"}}.dump() + "\n";
  std::string f = write("a.jsonl", text);
  auto r = run_process({bin_, "eval", "--answers", f, "--data", data_, "--k", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json s = json::parse(r.out);
  auto m = by_bench(s);
  EXPECT_EQ(m["cruxeval_o"]["items"], 2);
  EXPECT_EQ(m["cruxeval_o"]["samples"], 6);
  EXPECT_EQ(m["cruxeval_o"]["pass@1"], 16.67);   // (1/3 + 0) / 2
  EXPECT_EQ(m["cruxeval_o"]["pass@2"], 33.33);   // (2/3 + 0) / 2
  auto t = run_process({bin_, "eval", "--answers", f, "--data", data_, "--k", "2"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("cruxeval_o"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("pass@2"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("16.7"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("33.3"), std::string::npos) << t.out;
  // 2 of CRUXEval's 800 items answered: scored over those 2, and said (EvalPlus would refuse).
  EXPECT_EQ(m["cruxeval_o"]["benchmark_items"], 800);
  EXPECT_NE(t.out.find("2/800"), std::string::npos) << t.out;
  EXPECT_NE(t.err.find("cruxeval_o: answers for 2 of its 800 items"), std::string::npos) << t.err;
  // pass@1 is always there: --k 1 printed a second pass@1 column of the same numbers.
  auto k1 = run_process({bin_, "eval", "--answers", f, "--data", data_, "--k", "1"});
  ASSERT_EQ(k1.exit_code, 0) << k1.err;
  const size_t first = k1.out.find("pass@1");
  ASSERT_NE(first, std::string::npos) << k1.out;
  EXPECT_EQ(k1.out.find("pass@1", first + 1), std::string::npos) << k1.out;
}

TEST_F(EvalCli, BadLinesExit2WithFileAndLine) {
  const std::string ok = json{{"bench", "gsm8k"}, {"id", "0"}, {"response", "18"}}.dump();
  const std::pair<std::string, std::string> cases[] = {
      {"not json", "not valid JSON"},
      {"[1]", "expected a JSON object"},
      {R"({"id": "0", "response": "x"})", "field 'bench' is missing"},
      {R"({"bench": "nope", "id": "0", "response": "x"})", "unknown benchmark 'nope' (known: "},
      {R"({"bench": "gsm8k", "response": "x"})", "field 'id' is missing"},
      {R"({"bench": "gsm8k", "id": 1.5, "response": "x"})", "field 'id' must be"},
      {R"({"bench": "gsm8k", "id": "0"})", "field 'response' is missing"},
      {R"({"bench": "gsm8k", "id": "0", "response": 3})", "field 'response' must be a string"},
      {R"({"bench": "gsm8k", "id": "99999", "response": "x"})", "gsm8k has no item with id '99999' (its first is '0')"},
      // A pretty-printed file's first line; a line that parses but nests past what is echoed safely.
      {"{", "not valid JSON (parse error at line 1, column 2"},
      {"{", "; the input is JSON Lines: one JSON object a line"},
      {std::string(600, '[') + std::string(600, ']'), "nests deeper than 64 levels"},
  };
  for (const auto& [bad, msg] : cases) {
    std::string f = write("bad.jsonl", ok + "\n\n" + bad + "\n" + ok + "\n");
    auto r = run_process({bin_, "eval", "--answers", f, "--data", data_});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find(f + ":3: "), std::string::npos) << bad << " -> " << r.err;
    EXPECT_NE(r.err.find(msg), std::string::npos) << bad << " -> " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  auto none = run_process({bin_, "eval", "--data", data_});
  EXPECT_EQ(none.exit_code, 2);
  auto missing = run_process({bin_, "eval", "--answers", (dir_ / "missing.jsonl").string(), "--data", data_});
  EXPECT_EQ(missing.exit_code, 2);
  auto nodata = run_process({bin_, "eval", "--answers", write("g.jsonl", ok + "\n"), "--data", (dir_ / "nodir").string()});
  EXPECT_EQ(nodata.exit_code, 2);
  EXPECT_NE(nodata.err.find((dir_ / "nodir").string() + ": no such directory (the benchmark data dir)"),
            std::string::npos)
      << nodata.err;
  // Through $AZR_BENCHMARKS: said, as no flag names it; a file there is not a directory.
  const azr::testing::ChildEnvironment env({"AZR_BENCHMARKS=" + write("a-file", "x")}, {"AZR_BENCHMARKS="});
  auto from_env = run_process({bin_, "eval", "--answers", write("g.jsonl", ok + "\n")}, "", env.envp());
  EXPECT_EQ(from_env.exit_code, 2);
  EXPECT_NE(from_env.err.find((dir_ / "a-file").string() + ": not a directory (the benchmark data dir, from "
                              "$AZR_BENCHMARKS)"),
            std::string::npos)
      << from_env.err;
  // No answers at all: an empty table and exit 0 before.
  const std::string empty = write("empty.jsonl", "\n");
  auto no_answers = run_process({bin_, "eval", "--answers", empty, "--data", data_});
  EXPECT_EQ(no_answers.exit_code, 2);
  EXPECT_NE(no_answers.err.find(empty + ": no answers"), std::string::npos) << no_answers.err;
  // Generation's flags with answers made elsewhere: refused, where they were ignored.
  for (const std::vector<std::string>& flag : {std::vector<std::string>{"--n", "8"}, {"--temperature", "0.7"},
                                              {"--max-tokens", "64"}, {"--bench", "gsm8k"}}) {
    std::vector<std::string> args = {bin_, "eval", "--answers", write("g.jsonl", ok + "\n"), "--data", data_};
    args.insert(args.end(), flag.begin(), flag.end());
    auto r = run_process(args);
    EXPECT_EQ(r.exit_code, 2) << flag[0];
    EXPECT_NE(r.err.find("--answers excludes " + flag[0]), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// --out naming the --answers file truncated the answers before they were read, and a directory
// or unwritable --out failed only at grading, after --model had generated every answer. Refused
// before anything: the answers' bytes are unchanged and no model is loaded.
TEST_F(EvalCli, AnOutThatCannotTakeTheResultsIsRefusedFirst) {
  const std::string ok = json{{"bench", "gsm8k"}, {"id", "0"}, {"response", "18"}}.dump() + "\n";
  const std::string f = write("answers.jsonl", ok);
  auto same = run_process({bin_, "eval", "--answers", f, "--data", data_, "--out", f});
  EXPECT_EQ(same.exit_code, 2);
  EXPECT_NE(same.err.find("--out " + f + ": is the --answers file"), std::string::npos) << same.err;
  std::ifstream in(f);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), ok);
  EXPECT_EQ(run_process({bin_, "eval", "--answers", f, "--data", data_, "--out", "/dev/null"}).exit_code, 0);
  auto dir = run_process({bin_, "eval", "--answers", f, "--data", data_, "--out", dir_.string()});
  EXPECT_EQ(dir.exit_code, 2);
  EXPECT_NE(dir.err.find(": is a directory; give a file name"), std::string::npos) << dir.err;
  // With --model the check comes before the model is read: a model that does not exist is not
  // what the message is about.
  auto early = run_process({bin_, "eval", "--model", (dir_ / "no-model").string(), "--bench", "gsm8k", "--data", data_,
                            "--out", (dir_ / "no-dir" / "out.jsonl").string()});
  EXPECT_EQ(early.exit_code, 2);
  EXPECT_NE(early.err.find("--out " + (dir_ / "no-dir" / "out.jsonl").string() + ": cannot write in " +
                           (dir_ / "no-dir").string() + " (no such directory)"),
            std::string::npos)
      << early.err;
  // pass@k with fewer samples than k: refused before the model is read (it once generated every
  // answer, then warned that pass@k could not be reported).
  auto k = run_process({bin_, "eval", "--model", (dir_ / "no-model").string(), "--bench", "gsm8k", "--data", data_,
                        "--n", "2", "--k", "4"});
  EXPECT_EQ(k.exit_code, 2);
  EXPECT_NE(k.err.find("--k 4: pass@k needs --n 4 or more samples per item (--n is 2)"), std::string::npos) << k.err;
  // A model that learned the compact prompts (its bootstrap.json, or a checkpoint's
  // trainer_state.json, says so): without --template that wording is taken, and another
  // --template is warned of, before anything loads (the weights here are absent, so it stops
  // after). A quickstart checkpoint scored CRUXEval-I 0.0 under r1, without a word, against 12.5.
  for (const char* record : {"bootstrap.json", "trainer_state.json"}) {
    const fs::path styled = dir_ / (std::string("compact-model-") + record);
    fs::create_directories(styled);
    std::ofstream(styled / record) << R"({"step": 12, "prompt_style": "compact"})";
    const std::string file = (styled / record).string();
    auto asked = run_process({bin_, "eval", "--model", styled.string(), "--bench", "gsm8k", "--data", data_,
                              "--template", "r1"});
    EXPECT_NE(asked.err.find(file + " says the model learned the compact prompts; --template r1 is another wording "
                                    "(--template compact matches it)"),
              std::string::npos)
        << asked.err;
    auto unasked = run_process({bin_, "eval", "--model", styled.string(), "--bench", "gsm8k", "--data", data_});
    EXPECT_NE(unasked.err.find("eval: --template compact, the wording " + file + " says the model learned"),
              std::string::npos)
        << unasked.err;
    EXPECT_EQ(unasked.err.find("another wording"), std::string::npos) << unasked.err;
  }
  // A model that records nothing gets r1, and nothing is said of it.
  const fs::path plain = dir_ / "plain-model";
  fs::create_directories(plain);
  auto unrecorded = run_process({bin_, "eval", "--model", plain.string(), "--bench", "gsm8k", "--data", data_});
  EXPECT_EQ(unrecorded.err.find("--template"), std::string::npos) << unrecorded.err;
  auto top_p = run_process({bin_, "eval", "--model", (dir_ / "no-model").string(), "--top-p", "2"});
  EXPECT_EQ(top_p.exit_code, 2);
  EXPECT_NE(top_p.err.find("--top-p: 2 is too large: it must be in (0, 1]"), std::string::npos) << top_p.err;
  auto no_bench = run_process({bin_, "eval", "--model", (dir_ / "no-model").string(), "--data", data_});
  EXPECT_EQ(no_bench.exit_code, 2);
  EXPECT_EQ(no_bench.err, "azr: eval: --model needs --bench NAME[,NAME...]\n");
}

// The results replace --out whole or not at all: it was truncated when grading began, so Ctrl-C or
// a failure part-way lost the old results and left half the new ones, and a full disk gave a short
// file and exit 0. A symlink keeps pointing where it did; /dev/null and the like are written.
TEST_F(EvalCli, TheResultsFileIsReplacedWholeOrNotAtAll) {
  const std::string f = write("answers.jsonl", json{{"bench", "gsm8k"}, {"id", "0"}, {"response", "18"}}.dump());
  const std::string results = write("results.jsonl", "the old results\n");
  auto no_temporaries = [&] {
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().rfind("results.jsonl.tmp-", 0) == 0) return false;
    return true;
  };
  const azr::testing::ChildEnvironment failing_disk(
      {std::string("LD_PRELOAD=") + AZR_SYNC_LOG_LIB, "AZR_SYNC_FAIL=/results.jsonl.tmp-"});
  auto r = run_process({bin_, "eval", "--answers", f, "--data", data_, "--out", results}, "", failing_disk.envp());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("fsync failed: Input/output error"), std::string::npos) << r.err;
  std::ifstream kept(results);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "the old results\n");
  EXPECT_TRUE(no_temporaries());

  // The reason is the first failed write's, also when it came before the end (a result past the
  // 64 KiB buffer): an ofstream's later state said "an I/O error".
  const std::string long_answer =
      write("long.jsonl", json{{"bench", "gsm8k"}, {"id", "0"}, {"response", std::string(100000, 'x')}}.dump());
  for (const std::string& answers : {f, long_answer}) {
    r = run_process({bin_, "eval", "--answers", answers, "--data", data_, "--out", "/dev/full"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("/dev/full: write failed (No space left on device)"), std::string::npos) << r.err;
  }
  // A replaced file keeps its permissions: private results stay private.
  fs::permissions(results, fs::perms::owner_read | fs::perms::owner_write);
  r = run_process({bin_, "eval", "--answers", f, "--data", data_, "--out", results});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(fs::status(results).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  // A dangling symlink is followed: its target is made, the link kept.
  const fs::path dangling = dir_ / "dangling.jsonl";
  fs::create_symlink(dir_ / "made-through-the-link.jsonl", dangling);
  r = run_process({bin_, "eval", "--answers", f, "--data", data_, "--out", dangling.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "made-through-the-link.jsonl"));
  // --out /dev/stdout with stdout a file: written in place, where a rename replaced the file the
  // table was then printed to (an unlinked one).
  const std::string both = (dir_ / "both.txt").string();
  r = run_process({"/bin/sh", "-c", "\"$0\" eval --answers \"$1\" --data \"$2\" --out /dev/stdout > \"$3\"", bin_, f,
                   data_, both});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream both_in(both);
  const std::string both_text(std::istreambuf_iterator<char>(both_in), {});
  EXPECT_NE(both_text.find("\"correct\":true"), std::string::npos) << both_text;
  EXPECT_NE(both_text.find("gsm8k"), std::string::npos) << both_text;
  EXPECT_NE(both_text.find("pass@1"), std::string::npos) << "the table is gone:\n" << both_text;

  const fs::path link = dir_ / "link.jsonl";
  fs::create_symlink(results, link);
  r = run_process({bin_, "eval", "--answers", f, "--data", data_, "--out", link.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(link));
  std::ifstream written(results);
  std::string line;
  ASSERT_TRUE(std::getline(written, line));
  EXPECT_EQ(json::parse(line).value("correct", false), true) << line;
  EXPECT_FALSE(std::getline(written, line)) << "one answer, one line";
  EXPECT_TRUE(no_temporaries());

  fs::remove("-");  // one made by a build before the refusal
  r = run_process({bin_, "eval", "--answers", f, "--data", data_, "--out", "-"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--out -: the per-response results go to a file"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists("-"));
}

// Verdicts known by hand through the whole command: a saved model that answers \boxed{18} to every
// prompt (bigram_model.h) passes GSM8K's first item (gold 18) and fails its second (gold 3).
TEST_F(EvalCli, ASavedModelThatAlwaysAnswers18ScoresHalfOnTwoItems) {
  const std::string model = (dir_ / "eighteen").string();
  const azr::model::ByteTokenizer tok;
  const int32_t eos = 256;  // <|endoftext|>
  const Benchmark gsm8k = load_benchmark("gsm8k", data_);
  const std::string prompt = item_prompt(gsm8k, gsm8k.items.at(0), Template::R1);  // --template r1
  const std::vector<int32_t> chain = azr::testing::answer_chain(tok, prompt, "\\boxed{18}", eos);
  azr::testing::bigram_model(chain, int64_t(tok.vocab_size()), eos).save_pretrained(model);
  tok.save_tokenizer_json(model + "/tokenizer.json", true);
  const std::string out = (dir_ / "eighteen.jsonl").string();
  auto r = run_process({bin_, "eval", "--model", model, "--bench", "gsm8k", "--limit", "2", "--max-tokens", "32",
                        "--data", data_, "--json", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = by_bench(json::parse(r.out));
  EXPECT_EQ(m["gsm8k"]["items"], 2);
  EXPECT_EQ(m["gsm8k"]["pass@1"], 50.0) << r.out;
  std::ifstream in(out);
  std::vector<bool> correct;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    EXPECT_EQ(j["response"], "\\boxed{18}") << line;
    correct.push_back(j["correct"].get<bool>());
  }
  EXPECT_EQ(correct, (std::vector<bool>{true, false}));
}

TEST_F(EvalCli, ModelGeneratesAndGradesEndToEnd) {
  std::string model = (dir_ / "tiny").string();
  azr::model::Transformer::random(azr::model::preset_config("azr-tiny"), 7, 0.2f).save_pretrained(model);
  azr::model::ByteTokenizer().save_tokenizer_json(model + "/tokenizer.json", true);
  std::string out = (dir_ / "res.jsonl").string();
  auto r = run_process({bin_, "eval", "--model", model, "--bench", "gsm8k,cruxeval_o", "--limit", "2", "--max-tokens",
                        "8", "--data", data_, "--json", "--out", out, "--threads", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto m = by_bench(json::parse(r.out));
  EXPECT_EQ(m["gsm8k"]["items"], 2);
  EXPECT_EQ(m["cruxeval_o"]["items"], 2);
  EXPECT_TRUE(m["gsm8k"]["pass@1"].is_number());
  // A random model does not end its answer within 8 tokens: said, as the answers are cut off.
  EXPECT_NE(r.err.find("cruxeval_o: 2 of 2 responses stopped at --max-tokens 8"), std::string::npos) << r.err;
  // Generation's progress, a plain line (stderr is no terminal here) once all are done: each
  // response generated 8 tokens.
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("eval: gsm8k: 2/2 responses, \\d+ tokens/s, elapsed \\d+s, ETA 0s\n")))
      << r.err;
  // One response a batch: a line at each tenth passed, here at 1 of 2 and 2 of 2, no more.
  auto batches = run_process({bin_, "eval", "--model", model, "--bench", "gsm8k", "--limit", "2", "--max-tokens", "8",
                              "--data", data_, "--batch-size", "1", "--threads", "2"});
  ASSERT_EQ(batches.exit_code, 0) << batches.err;
  EXPECT_NE(batches.err.find("eval: gsm8k: 1/2 responses, "), std::string::npos) << batches.err;
  EXPECT_NE(batches.err.find("eval: gsm8k: 2/2 responses, "), std::string::npos) << batches.err;
  size_t lines_said = 0;
  for (size_t at = batches.err.find(" responses, "); at != std::string::npos;
       at = batches.err.find(" responses, ", at + 1))
    lines_said++;
  EXPECT_EQ(lines_said, 2u) << batches.err;
  std::ifstream in(out);
  std::string line;
  size_t lines = 0;
  while (std::getline(in, line)) lines++;
  EXPECT_EQ(lines, 4u);
  // n > 1 samples (sampled) with pass@k, boxed template.
  auto s = run_process({bin_, "eval", "--model", model, "--bench", "aime24", "--limit", "1", "--n", "2", "--k", "2",
                        "--max-tokens", "4", "--template", "boxed", "--data", data_, "--json"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  auto m2 = by_bench(json::parse(s.out));
  EXPECT_EQ(m2["aime24"]["samples"], 2);
  EXPECT_TRUE(m2["aime24"]["pass@2"].is_number());
  auto bad = run_process({bin_, "eval", "--model", model, "--bench", "nope", "--data", data_});
  EXPECT_EQ(bad.exit_code, 2);
}

}  // namespace
