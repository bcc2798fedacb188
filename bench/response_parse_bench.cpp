// Reading model responses: the solver's answer extraction (solver::extract_answer) and the
// proposer's parse (proposer::parse_code_proposal), which the trainer runs on every rollout on
// one thread. Model text is untrusted and up to max_response_tokens long, so besides ordinary
// responses this times the shapes that made the parsers' lazy patterns quadratic:
//   ordinary         a well-formed deduction answer after ~2 KB of thinking (the common case)
//   unclosed tags    an answer of N "<output>" with no "</output>" (the tag fallback's (.*?)
//                    runs to the end from each)
//   many calls       a program calling its helper N times (the rename's find_all)
// each with the JIT-compiled patterns and, as the baseline in the same run, PCRE2's interpreter
// (Regex::interpret_only), which is what the parsers ran before.
//
//   response_parse_bench [--sizes 1000,4000] [--reps 3]
//
// Prints a table (ms per response, median of the reps) and one JSON line; never asserts on time.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "proposer/parse.h"
#include "proposer/regex.h"
#include "solver/extract.h"

namespace {

using azr::bench::Clock;
using azr::buffer::TaskType;

std::string ordinary() {
  std::string think;
  while (think.size() < 2000) think += "Let me trace f on the list step by step, keeping the running total. ";
  return think + "\n</think>\n<answer>\n```output\n[1, 4, 9, 16]\n```\n</answer>";
}

std::string unclosed_tags(int n) {
  std::string s = " x\n</think>\n<answer>\n";
  for (int i = 0; i < n; ++i) s += "<output>";
  return s + "\n</answer>";
}

std::string many_calls(int n) {
  std::string s = " x\n</think>\n<answer>\n```python\ndef helper(a):\n    return (a";
  for (int i = 0; i < n; ++i) s += " + helper(";
  for (int i = 0; i < n; ++i) s += ")";
  return s + ")\n```\n```input\n1\n```\n</answer>";
}

// Milliseconds for one call of `run`, the median of `reps`.
template <class F>
double time_ms(int reps, F&& run) {
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    run();
    ms.push_back(azr::bench::secs_since(t0) * 1e3);
  }
  return azr::bench::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"response parsing: JIT-compiled patterns against PCRE2's interpreter"};
  std::vector<int> sizes{1000, 4000};
  int reps = 3;
  app.add_option("--sizes", sizes, "N for the adversarial shapes")->delimiter(',')->check(CLI::Range(1, 1000000));
  app.add_option("--reps", reps, "repetitions per figure (the median is printed)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  struct Case {
    std::string shape;
    int n;
    std::string text;
  };
  std::vector<Case> cases{{"ordinary", 1, ordinary()}};
  for (int n : sizes) cases.push_back({"unclosed tags", n, unclosed_tags(n)});
  for (int n : sizes) cases.push_back({"many calls", n, many_calls(n)});

  nlohmann::json rows = nlohmann::json::array();
  std::printf("| shape | N | bytes | JIT ms | interpreter ms | speed-up |\n|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    auto run = [&] {
      if (c.shape == "many calls") {
        auto r = azr::proposer::parse_code_proposal(TaskType::Deduction, c.text);
        if (!r.check.ok) std::fprintf(stderr, "many calls: parse failed (%s)\n", r.check.reason.c_str());
      } else {
        auto e = azr::solver::extract_answer(TaskType::Deduction, c.text);
        if (e.answer.empty() && c.shape == "ordinary") std::fprintf(stderr, "ordinary: no answer\n");
      }
    };
    run();  // compiles the function-local patterns before timing
    azr::proposer::Regex::interpret_only(false);
    const double jit = time_ms(reps, run);
    azr::proposer::Regex::interpret_only(true);
    const double interp = time_ms(reps, run);
    azr::proposer::Regex::interpret_only(false);
    std::printf("| %s | %d | %zu | %.3f | %.3f | %.0fx |\n", c.shape.c_str(), c.n, c.text.size(), jit, interp,
                interp / jit);
    rows.push_back(
        {{"shape", c.shape}, {"n", c.n}, {"bytes", c.text.size()}, {"jit_ms", jit}, {"interpreter_ms", interp}});
  }
  std::printf("%s\n", nlohmann::json{{"bench", "response_parse"}, {"reps", reps}, {"rows", rows}}.dump().c_str());
  return 0;
}
