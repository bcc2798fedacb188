// CRUXEval as a real-world corpus: 800 programs written by others, each with the output CPython
// recorded for its input. The sandbox must reproduce every one of those outputs, by value; a
// disagreement is printed with what the sandbox gave instead (bench/RESULTS.md: 800 of 800).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sandbox/checks.h"
#include "tests/test_support.h"

namespace azr::sandbox {
namespace {

TEST(CruxEval, SandboxReproducesRecordedOutputs) {
  std::string path = azr::testing::env_or_fail("AZR_SHARED_DIR") + "/benchmarks/cruxeval/cruxeval.jsonl";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  std::vector<EvalRequest> reqs;
  std::vector<std::string> expected, ids;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    reqs.push_back({j.at("code"), j.at("input")});
    expected.push_back(j.at("output"));
    ids.push_back(j.at("id"));
  }
  ASSERT_EQ(reqs.size(), 800u);

  Pool pool(PoolOptions{});
  Limits limits;
  limits.cpu_seconds = 5;  // a few CRUXEval programs are deliberately slow-ish string loops
  // What is checked is the outputs, not speed: a machine loaded past its cores must not turn a
  // slow program into a wall-clock timeout.
  limits.wall_seconds = 60;
  // CRUXEval inputs are Python expressions (lambda, dict(...), range(...)), as in the
  // benchmark's own `assert f(<input>) == <output>`.
  auto results = check_equals(pool, reqs, expected, limits, InputMode::Expression);

  size_t agree = 0;
  std::map<std::string, int> by_status;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    ++by_status[std::string(status_name(r.actual.status))];
    EXPECT_EQ(r.expected.status, Status::Ok) << ids[i] << ": recorded output is not a literal: " << expected[i];
    if (r.equal) {
      ++agree;
      continue;
    }
    std::cout << "  " << ids[i] << ": expected " << expected[i].substr(0, 80) << ", got "
              << status_name(r.actual.status) << " "
              << (r.actual.status == Status::Ok ? r.actual.repr.substr(0, 80)
                                                : r.actual.error_type + ": " + r.actual.message.substr(0, 80))
              << "\n";
  }
  for (const auto& [s, n] : by_status) std::cout << "  status " << s << ": " << n << "\n";
  std::cout << "  agreement: " << agree << " / " << results.size() << "\n";
  EXPECT_EQ(agree, results.size()) << "every program reproduces its recorded output (listed above where not)";
  EXPECT_EQ(by_status.count("internal_error"), 0u);
  EXPECT_EQ(by_status.count("violation"), 0u);
}

}  // namespace
}  // namespace azr::sandbox
