// Math answer grading: extraction, hand-labelled equivalence pairs, and every math benchmark's
// gold answers graded against themselves (all right) and against wrong answers (all wrong).
#include "eval/math_answer.h"

#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace {

using azr::eval::extract_math_answer;
using azr::eval::gold_math_answer;
using azr::eval::math_equivalent;

TEST(ExtractMathAnswer, NestedBracesInBoxed) {
  EXPECT_EQ(extract_math_answer(R"(so the answer is $\boxed{\frac{1}{2}}$.)"), R"(\frac{1}{2})");
  EXPECT_EQ(extract_math_answer(R"(\boxed{\left( 3, \frac{\pi}{2} \right)})"), R"(\left( 3, \frac{\pi}{2} \right))");
  EXPECT_EQ(extract_math_answer(R"(\boxed{\{1,2\}})"), R"(\{1,2\})");
}

TEST(ExtractMathAnswer, LastBoxedWins) {
  EXPECT_EQ(extract_math_answer(R"(first \boxed{3}, then corrected: \boxed{4})"), "4");
  EXPECT_EQ(extract_math_answer(R"(\boxed{3} and \fbox{5})"), "5");
  EXPECT_EQ(extract_math_answer(R"(\fbox{5} then \boxed{6})"), "6");
  EXPECT_EQ(extract_math_answer(R"(\boxed{7} then unbalanced \boxed{8)"), "7");
  EXPECT_EQ(extract_math_answer(R"(so $\boxed 9$)"), "9");
}

TEST(ExtractMathAnswer, AnswerTags) {
  EXPECT_EQ(extract_math_answer("<think>maybe 3</think><answer> 42 </answer>"), "42");
  EXPECT_EQ(extract_math_answer("<answer>1</answer> retry <answer>x = 2</answer>"), "x = 2");
  EXPECT_EQ(extract_math_answer(R"(<answer>the value is \boxed{17}</answer>)"), "17");
  // A \boxed anywhere wins over the tags.
  EXPECT_EQ(extract_math_answer(R"(\boxed{5} <answer>6</answer>)"), "5");
}

TEST(ExtractMathAnswer, LastNumberFallback) {
  EXPECT_EQ(extract_math_answer("She makes 9 * 2 = 18 dollars every day."), "18");
  EXPECT_EQ(extract_math_answer("The total is 1,250 apples"), "1250");
  EXPECT_EQ(extract_math_answer("it is -3.5 degrees"), "-3.5");
  EXPECT_EQ(extract_math_answer("ratio 2/3"), "2/3");
}

TEST(ExtractMathAnswer, NoAnswer) {
  EXPECT_EQ(extract_math_answer(""), std::nullopt);
  EXPECT_EQ(extract_math_answer("I don't know."), std::nullopt);
  EXPECT_EQ(extract_math_answer("<answer>   </answer>"), std::nullopt);
}

TEST(MathEquivalent, HandLabelledPairs) {
  std::ifstream in(std::string(AZR_MATH_FIXTURES) + "/math_pairs.jsonl");
  ASSERT_TRUE(in) << "cannot open math_pairs.jsonl";
  int total = 0, agree = 0, falses = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    std::string c = j["candidate"], g = j["gold"];
    bool want = j["equivalent"];
    bool got = math_equivalent(c, g);
    ++total;
    falses += !want;
    if (got == want)
      ++agree;
    else
      ADD_FAILURE() << "disagreement: candidate=" << c << " gold=" << g << " label=" << want << " got=" << got
                    << " (normalised: " << azr::eval::normalize_math_answer(c) << " | "
                    << azr::eval::normalize_math_answer(g) << ")";
  }
  std::printf("math_pairs: %d/%d agree (%.1f%%), %d labelled false\n", agree, total, 100.0 * agree / total, falses);
  EXPECT_GE(total, 120);
  EXPECT_GE(agree * 100, total * 99);
}

// A lone letter after a number: a variable in a gold, a unit in a candidate where the gold has no
// variable (a command's name such as \frac is none). Asserted one by one: the pairs file allows
// one disagreement in a hundred.
TEST(MathEquivalent, LoneTrailingLetters) {
  EXPECT_TRUE(math_equivalent("0.5 m", "\\frac{1}{2}"));
  EXPECT_TRUE(math_equivalent("5 m", "5"));
  EXPECT_TRUE(math_equivalent("2n", "2 n"));
  EXPECT_FALSE(math_equivalent("2", "2 n"));
}

// Greek letters are variables, as sympy reads them for Qwen2.5-Math's grader (Minerva's golds:
// `2 \pi / \omega`, `2.2 \tau`); `\pi` stays the constant. One by one, as above.
TEST(MathEquivalent, GreekLettersAreVariables) {
  EXPECT_TRUE(math_equivalent("\\frac{2\\pi}{\\omega}", "2 \\pi / \\omega"));
  EXPECT_FALSE(math_equivalent("\\frac{\\pi}{\\omega}", "2 \\pi / \\omega"));
  EXPECT_TRUE(math_equivalent("\\frac{11\\tau}{5}", "2.2 \\tau"));
  EXPECT_FALSE(math_equivalent("2\\tau", "2.2 \\tau"));
  EXPECT_TRUE(math_equivalent("\\omega t", "t\\omega"));  // not the command \omegat
  EXPECT_FALSE(math_equivalent("\\alpha", "\\beta"));
  EXPECT_FALSE(math_equivalent("\\pi", "\\omega"));
}

// A systematically wrong answer: the first digit changed (d -> d+1 mod 10).
std::optional<std::string> change_first_digit(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      std::string t = s;
      t[i] = static_cast<char>('0' + (s[i] - '0' + 1) % 10);
      return t;
    }
  return std::nullopt;
}

TEST(MathEquivalent, BenchmarkGoldsAgainstThemselves) {
  std::string shared = azr::testing::env_or_fail("AZR_SHARED_DIR");
  ASSERT_FALSE(shared.empty());
  for (std::string bench : {"math500", "aime24", "aime25", "amc23", "minerva_math", "olympiadbench", "gsm8k"}) {
    std::ifstream in(shared + "/benchmarks/" + bench + "/test.jsonl");
    ASSERT_TRUE(in) << bench;
    int items = 0, no_gold = 0, self = 0, boxed = 0, wrong_99999 = 0, digit_variants = 0, digit_wrong = 0;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      ++items;
      auto gold = gold_math_answer(bench, nlohmann::json::parse(line));
      if (!gold) {
        ++no_gold;
        ADD_FAILURE() << bench << " item " << items << ": no gold answer";
        continue;
      }
      if (math_equivalent(*gold, *gold))
        ++self;
      else
        ADD_FAILURE() << bench << ": gold not equivalent to itself: " << *gold;
      auto extracted = extract_math_answer("Thinking... the answer is \\boxed{" + *gold + "}.");
      if (extracted && math_equivalent(*extracted, *gold))
        ++boxed;
      else
        ADD_FAILURE() << bench << ": boxed gold not graded right: " << *gold << " extracted "
                      << extracted.value_or("<none>");
      auto wrong = extract_math_answer("\\boxed{-99999}");
      if (wrong && math_equivalent(*wrong, *gold))
        ADD_FAILURE() << bench << ": -99999 graded right against " << *gold;
      else
        ++wrong_99999;
      if (auto changed = change_first_digit(*gold)) {
        ++digit_variants;
        if (math_equivalent(*changed, *gold))
          ADD_FAILURE() << bench << ": digit-changed " << *changed << " graded right against " << *gold;
        else
          ++digit_wrong;
      }
    }
    std::printf("%-14s items=%d gold=%d self=%d boxed=%d -99999 graded wrong=%d/%d, digit-changed graded wrong=%d/%d\n",
                bench.c_str(), items, items - no_gold, self, boxed, wrong_99999, items - no_gold, digit_wrong, digit_variants);
    EXPECT_GT(items, 0) << bench;
  }
}

}  // namespace
