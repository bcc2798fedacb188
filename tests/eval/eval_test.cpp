// azr eval's library parts: pass@k against the closed form, the benchmark registry and loaders,
// the prompts and the CRUXEval answer extraction.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "eval/benchmarks.h"
#include "eval/cruxeval.h"
#include "eval/pass_at_k.h"
#include "eval/prompts.h"
#include "eval/report.h"
#include "model/chat_format.h"
#include "solver/prompts.h"

namespace {

using namespace azr::eval;

// 1 - C(n-c, k) / C(n, k) with exact binomials in long double (n small enough).
long double binom(int64_t n, int64_t k) {
  if (k < 0 || k > n) return 0;
  long double r = 1;
  for (int64_t i = 1; i <= k; ++i) r = r * (n - k + i) / i;
  return r;
}
double closed_form(int64_t n, int64_t c, int64_t k) { return double(1.0L - binom(n - c, k) / binom(n, k)); }

TEST(PassAtK, MatchesClosedForm) {
  int checked = 0;
  for (int64_t n = 1; n <= 60; ++n)
    for (int64_t c = 0; c <= n; ++c)
      for (int64_t k = 1; k <= n; ++k) {
        double got = pass_at_k(n, c, k);
        EXPECT_NEAR(got, closed_form(n, c, k), 1e-12) << "n=" << n << " c=" << c << " k=" << k;
        EXPECT_GE(got, 0.0);
        EXPECT_LE(got, 1.0);
        checked++;
      }
  EXPECT_GT(checked, 30000);
}

TEST(PassAtK, EdgeCases) {
  EXPECT_EQ(pass_at_k(10, 0, 1), 0.0);
  EXPECT_EQ(pass_at_k(10, 0, 10), 0.0);
  EXPECT_EQ(pass_at_k(10, 10, 1), 1.0);
  EXPECT_EQ(pass_at_k(10, 3, 8), 1.0);   // n - c = 7 < k
  EXPECT_EQ(pass_at_k(10, 1, 10), 1.0);  // k = n, any correct
  EXPECT_DOUBLE_EQ(pass_at_k(10, 3, 1), 0.3);  // pass@1 = c / n
  EXPECT_DOUBLE_EQ(pass_at_k(1, 1, 1), 1.0);
  // Large n: stable (binomials would overflow a double).
  double big = pass_at_k(2000, 1, 1000);
  EXPECT_NEAR(big, 0.5, 1e-12);
  EXPECT_THROW(pass_at_k(5, 1, 0), std::invalid_argument);
  EXPECT_THROW(pass_at_k(5, 1, 6), std::invalid_argument);
  EXPECT_THROW(pass_at_k(5, 6, 1), std::invalid_argument);
  EXPECT_THROW(pass_at_k(5, -1, 1), std::invalid_argument);
}

TEST(Registry, NamesAndCategories) {
  EXPECT_EQ(benchmark_registry().size(), 13u);
  for (const char* n : {"humaneval", "humanevalplus", "mbpp", "mbppplus"})
    EXPECT_EQ(find_benchmark(n)->category, Category::Code) << n;
  for (const char* n : {"aime24", "aime25", "amc23", "math500", "minerva_math", "olympiadbench"})
    EXPECT_EQ(find_benchmark(n)->category, Category::Math) << n;
  EXPECT_EQ(find_benchmark("gsm8k")->category, Category::Gsm8k);
  EXPECT_EQ(find_benchmark("cruxeval_o")->category, Category::Cruxeval);
  EXPECT_EQ(find_benchmark("cruxeval_i")->category, Category::Cruxeval);
  EXPECT_EQ(find_benchmark("livecodebench"), nullptr);
}

std::string data_dir() {
  const char* s = std::getenv("AZR_SHARED_DIR");
  return s ? std::string(s) + "/benchmarks" : "../shared/benchmarks";
}

TEST(Loaders, ItemCountsAndGold) {
  const std::pair<const char*, size_t> expect[] = {
      {"cruxeval_o", 800}, {"cruxeval_i", 800}, {"humaneval", 164},    {"humanevalplus", 164},
      {"mbpp", 500},       {"mbppplus", 378},   {"gsm8k", 1319},       {"math500", 500},
      {"aime24", 30},      {"aime25", 30},      {"amc23", 40},         {"minerva_math", 272},
      {"olympiadbench", 675}};
  for (auto [name, n] : expect) {
    Benchmark b = load_benchmark(name, data_dir());
    EXPECT_EQ(b.items.size(), n) << name;
    for (const auto& it : b.items) {
      EXPECT_FALSE(it.id.empty()) << name;
      EXPECT_FALSE(it.prompt.empty()) << name << " " << it.id;
      // cruxeval_i sample_135's input is the empty argument list.
      if (!(std::string(name) == "cruxeval_i" && it.id == "sample_135")) {
        EXPECT_FALSE(it.gold.empty()) << name << " " << it.id;
      }
    }
  }
  Benchmark o = load_benchmark("cruxeval_o", data_dir());
  EXPECT_EQ(o.items[0].id, "sample_0");
  EXPECT_EQ(o.items[0].gold, "[(4, 1), (4, 1), (4, 1), (4, 1), (2, 3), (2, 3)]");
  Benchmark i = load_benchmark("cruxeval_i", data_dir());
  EXPECT_EQ(i.items[0].gold, "[1, 1, 3, 1, 3, 1]");
  Benchmark g = load_benchmark("gsm8k", data_dir());
  EXPECT_EQ(g.items[0].id, "0");
  EXPECT_EQ(g.items[0].gold, "18");
  Benchmark a = load_benchmark("aime24", data_dir());
  EXPECT_EQ(a.items[0].id, "60");
  EXPECT_EQ(a.items[0].gold, "204");
  EXPECT_THROW(load_benchmark("nope", data_dir()), BenchmarkError);
  EXPECT_THROW(load_benchmark("gsm8k", "/nonexistent"), BenchmarkError);
}

// The message of a malformed benchmark file names the file and its line (blank lines counted),
// not the item's 0-based index; a duplicate id names the folder and both items.
TEST(Loaders, BadFilesAreNamedByFileAndLine) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("azr_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "cruxeval");
  const std::string good = R"({"id": "a", "code": "def f(x): return x", "input": "1", "output": "1"})";
  auto message_for = [&](const std::string& text) -> std::string {
    std::ofstream(dir / "cruxeval" / "cruxeval.jsonl") << text;
    try {
      load_benchmark("cruxeval_o", dir);
    } catch (const BenchmarkError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string file = (dir / "cruxeval" / "cruxeval.jsonl").string();
  EXPECT_EQ(message_for("\n" + good + "\n\n" + R"({"id": "b", "code": "x", "input": "1"})" + "\n"),
            file + ":4: field 'output' missing or not a string");
  const std::string twice = message_for(good + "\n" + good + "\n");
  EXPECT_EQ(twice, "cruxeval_o (in " + (dir / "cruxeval").string() + "): duplicate item id 'a' (items 1 and 2)");
  // An empty file, or a directory in the file's place, would score 0 of 0: an error instead.
  EXPECT_EQ(message_for("\n\n"), "cruxeval_o (in " + (dir / "cruxeval").string() + "): no items");
  // An empty gold would grade every answer wrong without a word.
  std::filesystem::create_directories(dir / "aime25");
  std::ofstream(dir / "aime25" / "test.jsonl") << R"({"id": 1, "problem": "p", "answer": "4"})" << "\n"
                                                << R"({"id": 2, "problem": "q", "answer": " "})" << "\n";
  std::filesystem::create_directories(dir / "minerva_math");
  std::ofstream(dir / "minerva_math" / "test.jsonl") << R"({"problem": "p", "solution": "so \\boxed{}"})" << "\n";
  for (const auto& [bench, file] : {std::pair{"aime25", "aime25/test.jsonl:2"},
                                     std::pair{"minerva_math", "minerva_math/test.jsonl:1"}}) {
    try {
      load_benchmark(bench, dir);
      ADD_FAILURE() << bench << " loaded an empty gold";
    } catch (const BenchmarkError& e) {
      EXPECT_EQ(std::string(e.what()), (dir / file).string() + ": the gold answer is empty");
    }
  }
  for (const auto& [bench, file] : {std::pair{"aime24", "aime24/test.jsonl"},
                                     std::pair{"humaneval", "humaneval/HumanEval.jsonl.gz"}}) {
    std::filesystem::create_directories(dir / file);
    try {
      load_benchmark(bench, dir);
      ADD_FAILURE() << "a directory in the place of " << file << " loaded";
    } catch (const BenchmarkError& e) {
      EXPECT_EQ(std::string(e.what()), (dir / file).string() + ": not a file");
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(Prompts, Templates) {
  std::string r1 = math_prompt("What is 1+1?", Template::R1);
  EXPECT_EQ(r1, azr::model::render_r1(std::string("What is 1+1?\n") + std::string(kBoxedInstruction)));
  EXPECT_EQ(math_prompt("What is 1+1?", Template::Boxed),
            "What is 1+1?\nPlease reason step by step, and put your final answer within \\boxed{}.");
  EXPECT_NE(code_prompt("def f(x):\n", Template::R1).find("```python\ndef f(x):\n```"), std::string::npos);
  BenchItem it;
  it.program = "def f(x):\n    return x + 1";
  it.input = "1";
  it.output = "2";
  std::string po = cruxeval_prompt(it, true), pi = cruxeval_prompt(it, false);
  EXPECT_NE(po.find(it.program), std::string::npos);
  EXPECT_TRUE(po.ends_with("<think>"));
  EXPECT_TRUE(pi.ends_with("<think>"));
  EXPECT_NE(po, pi);
  EXPECT_EQ(parse_template("boxed"), Template::Boxed);
  EXPECT_EQ(parse_template("compact"), Template::Compact);
  EXPECT_THROW(parse_template("chatml"), std::invalid_argument);
  // Compact: the solver's compact prompts for CRUXEval; the r1 bodies in the compact wrapper.
  azr::buffer::Task task;
  task.type = azr::buffer::TaskType::Deduction;
  task.program = it.program;
  task.input = it.input;
  EXPECT_EQ(cruxeval_prompt(it, true, Template::Compact), azr::solver::solver_prompt(task, azr::model::PromptStyle::Compact));
  EXPECT_EQ(math_prompt("What is 1+1?", Template::Compact),
            "User: What is 1+1?\n" + std::string(kBoxedInstruction) + "\nAssistant: <think>");
}

TEST(Cruxeval, Extraction) {
  EXPECT_EQ(extract_cruxeval_answer("  [1, 2]\n", true), "[1, 2]");
  EXPECT_EQ(extract_cruxeval_answer("```output\n[1, 2]\n```", true), "[1, 2]");
  EXPECT_EQ(extract_cruxeval_answer("reasoning</think> <answer>\n```output\n'ab'\n```\n</answer>", true), "'ab'");
  EXPECT_EQ(extract_cruxeval_answer("x</think> <answer>```input\n'a', 2\n```</answer>", false), "'a', 2");
}

TEST(Report, ScoresAndSummary) {
  Benchmark b;
  b.info = *find_benchmark("gsm8k");
  b.items.resize(2);
  b.items[0].id = "0";
  b.items[0].gold = "18";
  b.items[1].id = "1";
  b.items[1].gold = "3";
  std::vector<Sample> s = {{0, "\\boxed{18}"}, {0, "17"}, {1, "no number"}, {1, "the answer is \\boxed{3}"}};
  std::vector<Verdict> v;
  for (const auto& x : s) v.push_back(grade_math_response(x.response, b.items[x.item].gold));
  ASSERT_EQ(v.size(), 4u);
  EXPECT_TRUE(v[0].correct);
  EXPECT_FALSE(v[1].correct);
  EXPECT_EQ(v[1].reason, "wrong");
  EXPECT_EQ(v[2].reason, "no_answer");
  EXPECT_TRUE(v[3].correct);
  BenchScore sc = score_bench(b, s, v, 2);
  EXPECT_EQ(sc.items, 2u);
  EXPECT_DOUBLE_EQ(sc.pass1, 0.5);
  ASSERT_TRUE(sc.passk);
  EXPECT_DOUBLE_EQ(*sc.passk, 1.0);
  EXPECT_EQ(sc.benchmark_items, b.items.size());
  // Fields: name, category, items, benchmark_items, samples, min_n, pass@1, pass@k.
  BenchScore code{"humanevalplus", Category::Code, 1, 1, 1, 1, 1.0, std::nullopt};
  BenchScore partial{"mbppplus", Category::Code, 1, 378, 1, 1, 0.0, std::nullopt};  // 1 of 378 answered
  BenchScore base{"humaneval", Category::Code, 1, 1, 1, 1, 0.0, std::nullopt};      // reported, not averaged
  BenchScore math{"aime24", Category::Math, 1, 1, 1, 1, 0.5, std::nullopt};
  Summary sum = summarize({code, partial, base, math, sc}, 0);
  EXPECT_DOUBLE_EQ(*sum.code_avg, 0.5);  // HumanEval+ and MBPP+, as the paper's (no base HumanEval)
  EXPECT_DOUBLE_EQ(*sum.math_avg, 0.5);  // gsm8k not in the math avg
  EXPECT_DOUBLE_EQ(*sum.overall, 0.5);
  const std::string table = format_table(sum);
  EXPECT_NE(table.find("50.0"), std::string::npos);
  EXPECT_NE(table.find("1/378"), std::string::npos) << table;
  EXPECT_EQ(summary_json(sum)["overall"], 50.0);
  EXPECT_EQ(summary_json(sum)["benchmarks"][1]["benchmark_items"], 378);
  // Which benchmarks the averages are of, and that they are not the paper's: its code average
  // also has LiveCodeBench, its math average six benchmarks.
  EXPECT_EQ(sum.code_avg_of, (std::vector<std::string>{"humanevalplus", "mbppplus"}));
  EXPECT_EQ(sum.math_avg_of, (std::vector<std::string>{"aime24"}));
  EXPECT_NE(table.find("code avg of humanevalplus, mbppplus (the paper's also has LiveCodeBench"), std::string::npos)
      << table;
  EXPECT_NE(table.find("math avg of aime24 (1 of the paper's 6)"), std::string::npos) << table;
  EXPECT_EQ(summary_json(sum)["math_avg_of"], nlohmann::json::array({"aime24"}));
  std::vector<BenchScore> six;
  for (const char* m : {"aime24", "aime25", "amc23", "math500", "minerva_math", "olympiadbench"})
    six.push_back({m, Category::Math, 1, 1, 1, 1, 1.0, std::nullopt});
  const std::string math_only = format_table(summarize(six, 0));
  EXPECT_EQ(math_only.find("math avg of"), std::string::npos) << math_only;  // all six: the paper's set
  EXPECT_EQ(math_only.find("code avg of"), std::string::npos) << math_only;  // no code benchmark
}

}  // namespace
