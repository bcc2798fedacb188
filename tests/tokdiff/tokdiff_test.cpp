// Differential test: azr's BpeTokenizer against Hugging Face's Rust `tokenizers` (npm
// tokenizers@0.23.2, run with node) on a fixed small generated sample. Zero mismatches allowed.
// Environment (set by tests/CMakeLists.txt): AZR_SHARED_DIR, AZR_PYTHON, AZR_TESTS_DIR.
// Skips (GTEST_SKIP) when node or tests/tokdiff/node_modules/tokenizers is missing: run
// scripts/setup.sh (npm ci --prefix tests/tokdiff). The large sample runs in bench/tokenizer_bench.
#include <gtest/gtest.h>
#include <stdlib.h>  // mkdtemp
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/tokenizer.h"
#include "tests/tokdiff/tokdiff_support.h"

namespace fs = std::filesystem;

namespace {

using azr::tokdiff::read_lines;
using azr::tokdiff::sh_quote;
using azr::tokdiff::TempDir;

constexpr int kStrings = 1500;
constexpr int kSeed = 20261122;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}


bool have_node() { return std::system("command -v node >/dev/null 2>&1") == 0; }

// Runs `cmd` through the shell; returns its exit status, stderr folded into `log`.
int run(const std::string& cmd, const fs::path& log) {
  int rc = std::system((cmd + " 2>" + sh_quote(log.string())).c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}


// Printable form of a UTF-8 string: ASCII as is, everything else as \xNN / \uXXXX JSON escapes.
std::string escaped(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', /*ensure_ascii=*/true);
}

std::string ids_str(const std::vector<int32_t>& ids) { return nlohmann::json(ids).dump(); }


TEST(TokDiff, RustTokenizersAgreeOnGeneratedSample) {
  const fs::path tests_dir = env_or("AZR_TESTS_DIR", "tests");
  const fs::path shared = env_or("AZR_SHARED_DIR", "../shared");
  const std::string python = env_or("AZR_PYTHON", "/usr/bin/python3.11");
  const fs::path dir = tests_dir / "tokdiff";
  const fs::path tokenizer_json = shared / "models" / "qwen-tokenizer" / "tokenizer.json";

  if (!have_node()) GTEST_SKIP() << "node not found on PATH: differential test against HF Rust tokenizers skipped";
  if (!fs::exists(dir / "node_modules" / "tokenizers" / "package.json"))
    GTEST_SKIP() << (dir / "node_modules" / "tokenizers").string()
                 << " missing: run scripts/setup.sh (npm ci --prefix tests/tokdiff); differential test skipped";
  ASSERT_TRUE(fs::exists(tokenizer_json)) << tokenizer_json;

  TempDir tmp("azr-tokdiff");
  const fs::path corpus = tmp.path / "corpus.jsonl";
  const fs::path ref = tmp.path / "rust_ids.jsonl";
  const fs::path log = tmp.path / "stderr.txt";

  std::string gen = sh_quote(python) + " " + sh_quote((dir / "gen_corpus.py").string()) + " diff --shared " +
                    sh_quote(shared.string()) + " --n " + std::to_string(kStrings) + " --seed " +
                    std::to_string(kSeed) + " --out " + sh_quote(corpus.string()) + " >/dev/null";
  ASSERT_EQ(run(gen, log), 0) << gen << "\n" << slurp(log);

  std::string node = "node " + sh_quote((dir / "encode.mjs").string()) + " " + sh_quote(tokenizer_json.string()) +
                     " " + sh_quote(corpus.string()) + " >" + sh_quote(ref.string());
  ASSERT_EQ(run(node, log), 0) << node << "\n" << slurp(log);

  const auto inputs = read_lines(corpus);
  const auto outputs = read_lines(ref);
  ASSERT_EQ(inputs.size(), static_cast<size_t>(kStrings));
  ASSERT_EQ(outputs.size(), inputs.size()) << "encode.mjs wrote a different number of lines";

  azr::model::BpeTokenizer tok(tokenizer_json.string());
  size_t mismatches = 0, tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string text = nlohmann::json::parse(inputs[i]).at("text").get<std::string>();
    const auto want = nlohmann::json::parse(outputs[i]).at("ids").get<std::vector<int32_t>>();
    tokens += want.size();
    std::vector<int32_t> got;
    try {
      got = tok.encode(text);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "string " << i << " " << escaped(text) << ": encode threw " << e.what();
      ++mismatches;
      continue;
    }
    if (got != want) {
      if (++mismatches <= 5)
        ADD_FAILURE() << "mismatch on string " << i << ": " << escaped(text) << "\n  rust: " << ids_str(want)
                      << "\n  azr:  " << ids_str(got);
    }
  }
  std::printf("tokdiff: %zu strings, %zu tokens, %zu mismatches\n", inputs.size(), tokens, mismatches);
  EXPECT_EQ(mismatches, 0u) << "of " << inputs.size() << " strings";
}

}  // namespace
