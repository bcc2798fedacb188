// The seeding phase with the real sandbox and a real SQLite buffer. The model is a scripted
// function returning hand-written responses: a real model proposes valid tasks only after the
// warm start (issue: zero-data bootstrap), so this test double stands in for it.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "proposer/seed.h"
#include "proposer/seeding.h"
#include "tests/test_support.h"

namespace azr::proposer {
namespace {

namespace fs = std::filesystem;
using buffer::TaskType;

sandbox::PoolOptions pool_options() {
  sandbox::PoolOptions o;
  o.workers = 2;
  return o;
}

std::string code_response(const std::string& program, const std::string& input) {
  return "I will write a small function.</think>\n<answer>\n```python\n" + program + "\n```\n```input\n" + input +
         "\n```\n</answer>";
}

TEST(SeedingTest, GrowsEveryTypeFromTheIdentitySeed) {
  const fs::path dir = fs::temp_directory_path() / ("azr_seeding_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  buffer::TaskBuffer buf = buffer::TaskBuffer::open((dir / "buffer.db").string(), buffer::TaskBuffer::Mode::ReadWrite);
  sandbox::Pool pool(pool_options());

  int counter = 0;
  std::vector<std::string> all_prompts;
  GenerateFn scripted = [&](const std::vector<std::string>& prompts) {
    std::vector<std::string> out;
    for (const std::string& p : prompts) {
      all_prompts.push_back(p);
      const int n = counter++;
      if (p.find("PLUGGED HERE") != std::string::npos) {  // induction: ten inputs and a message
        std::string r = "Numbers.</think>\n<answer>\n";
        for (int i = 0; i < 10; i++) r += "```input\n" + std::to_string(n * 10 + i) + "\n```\n";
        r += "```message\nTry small integers.\n```\n</answer>";
        out.push_back(r);
      } else if (n % 4 == 3) {  // every fourth proposal imports a banned module
        out.push_back(code_response("import random\ndef f(x):\n    return random.random() + x", "1"));
      } else if (n % 4 == 2) {  // and one in four repeats the identity seed: a duplicate
        out.push_back(code_response("def f(a):\n    return a", "'Hello world'"));
      } else {
        out.push_back(code_response("def g(x):\n    return x * " + std::to_string(n + 2), std::to_string(n)));
      }
    }
    return out;
  };

  SeedingSettings s;
  s.target = 6, s.batch = 4, s.k = 2;
  const SeedingReport r = grow_seed_buffer(buf, pool, scripted, s);
  EXPECT_TRUE(r.reached_target);
  const buffer::Counts c = buf.counts();
  for (int t = 0; t < 3; t++) EXPECT_EQ(c.by_type[t], 6) << "type " << t;
  EXPECT_GT(r.rejected.at("banned_import"), 0);
  EXPECT_GT(r.duplicates, 0);
  // Every task is a seed of step 0; the first deduction prompts could only reference the identity.
  EXPECT_EQ(c.by_type_origin[int(TaskType::Deduction)][int(buffer::Origin::Seed)], 6);
  ASSERT_FALSE(all_prompts.empty());
  EXPECT_NE(all_prompts[0].find(identity_seed(TaskType::Deduction).program), std::string::npos);
  // Proposed programs were renamed to f and their outputs computed by the sandbox.
  bool found = false;
  std::mt19937_64 rng(1);
  for (const buffer::Task& t : buf.sample_references(TaskType::Deduction, 6, rng))
    if (t.program == "def f(x):\n    return x * 2") {
      found = true;
      EXPECT_EQ(t.input, "0");
      EXPECT_EQ(t.output, "0");
    }
  EXPECT_TRUE(found);
  fs::remove_all(dir);
}

TEST(SeedingTest, AModelThatProposesNothingValidStopsAfterMaxRounds) {
  const fs::path dir = fs::temp_directory_path() / ("azr_seeding_none_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  buffer::TaskBuffer buf = buffer::TaskBuffer::open((dir / "buffer.db").string(), buffer::TaskBuffer::Mode::ReadWrite);
  sandbox::Pool pool(pool_options());
  GenerateFn babble = [](const std::vector<std::string>& prompts) {
    return std::vector<std::string>(prompts.size(), "asdf qwer</think> no answer here");
  };
  SeedingSettings s;
  s.target = 4, s.batch = 3, s.max_rounds = 2;
  const SeedingReport r = grow_seed_buffer(buf, pool, babble, s);
  EXPECT_FALSE(r.reached_target);
  EXPECT_EQ(r.rounds, 2);
  EXPECT_EQ(r.rejected.at("no_answer"), 2 * 3 * 3);
  for (int t = 0; t < 3; t++) EXPECT_EQ(buf.counts().by_type[t], 1);  // the identity seeds only
  fs::remove_all(dir);
}

}  // namespace
}  // namespace azr::proposer
