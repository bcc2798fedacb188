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
  // Prose in the tags: what follows "the answer is", as Qwen2.5-Math's extractor reads it.
  EXPECT_EQ(extract_math_answer("<answer>The answer is 5.</answer>"), "5");
  EXPECT_EQ(extract_math_answer("<answer>So the answer is: 7.</answer>"), "7");
  EXPECT_EQ(extract_math_answer("<answer>I think the answer is \\frac{1}{2}</answer>"), "\\frac{1}{2}");
  EXPECT_EQ(extract_math_answer("<answer>The answer is</answer>"), "The answer is");
  EXPECT_TRUE(math_equivalent(*extract_math_answer("<answer>The answer is 5</answer>"), "5"));
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

// From an audit against Qwen2.5-Math's grader (evaluation/grader.py), on MATH-500's own golds:
// each pair below it calls equal, and so does the mathematics. One by one, as below.
TEST(MathEquivalent, PairsQwensGraderAcceptsOnMath500Golds) {
  // number_theory/417: a comma and \! separate thousands, with a space after them.
  EXPECT_TRUE(math_equivalent("11111111100", "11,\\! 111,\\! 111,\\! 100"));
  EXPECT_TRUE(math_equivalent("11,111,111,100", "11,\\! 111,\\! 111,\\! 100"));
  EXPECT_FALSE(math_equivalent("11111111101", "11,\\! 111,\\! 111,\\! 100"));
  EXPECT_FALSE(math_equivalent("1000", "1, 000"));  // a bare comma and a space: still a list
  // prealgebra/105, algebra/1349: text answers whatever their case; a command's case matters.
  EXPECT_TRUE(math_equivalent("\\text{East}", "\\text{east}"));
  EXPECT_TRUE(math_equivalent("evelyn", "\\text{Evelyn}"));
  EXPECT_TRUE(math_equivalent("No solution", "\\text{no solution}"));
  EXPECT_FALSE(math_equivalent("Q-q", "q-Q"));  // expressions keep their case
  EXPECT_FALSE(math_equivalent("2N", "2n"));
  EXPECT_FALSE(math_equivalent("\\text{West}", "\\text{east}"));
  EXPECT_FALSE(math_equivalent("\\Delta", "\\delta"));
  // precalculus/807: polar coordinates with and without their parentheses, in order only.
  EXPECT_TRUE(math_equivalent("3, \\frac{\\pi}{2}", "\\left( 3, \\frac{\\pi}{2} \\right)"));
  EXPECT_TRUE(math_equivalent("(1,-2)", "1,-2"));
  EXPECT_FALSE(math_equivalent("\\frac{\\pi}{2}, 3", "\\left( 3, \\frac{\\pi}{2} \\right)"));
  EXPECT_FALSE(math_equivalent("[1,-2]", "1,-2"));  // an interval is not the list
  EXPECT_FALSE(math_equivalent("(1,-2)", "\\{1,-2\\}"));  // nor is a tuple the set
  // Where `(a, b)` says it is an interval, the bare list is not it; nor is a \pm's pair of roots a point.
  EXPECT_FALSE(math_equivalent("-\\infty, 3", "(-\\infty, 3)"));
  EXPECT_FALSE(math_equivalent("1,2", "x \\in (1,2)"));
  EXPECT_FALSE(math_equivalent("\\pm 2", "(2,-2)"));
  EXPECT_FALSE(math_equivalent("(1\\pm 2)", "(3,-1)"));
  // intermediate_algebra/2015: a \pm inside a set stands for two of its elements.
  EXPECT_TRUE(math_equivalent("-2, 1+\\sqrt{5}, 1-\\sqrt{5}", "\\{1\\pm\\sqrt{5},-2\\}"));
  EXPECT_TRUE(math_equivalent("\\{1+\\sqrt5,1-\\sqrt5,-2\\}", "\\{1\\pm\\sqrt{5},-2\\}"));
  EXPECT_FALSE(math_equivalent("-2, 1+\\sqrt{5}", "\\{1\\pm\\sqrt{5},-2\\}"));
  EXPECT_TRUE(math_equivalent("\\{1+\\sqrt5,1-\\sqrt5\\}", "\\{1\\pm\\sqrt{5}\\}"));  // the \pm its only element
  EXPECT_FALSE(math_equivalent("\\{a+od5,a-od5,2\\}", "a \\pmod 5, 2"));  // \pmod is no \pm
  // precalculus/659: a plane's equation, its terms reordered, moved across, or negated.
  const std::string plane = "5x - 7y + 11z + 4 = 0";
  EXPECT_TRUE(math_equivalent("5x+11z-7y+4=0", plane));
  EXPECT_TRUE(math_equivalent("5x+11z-7y=-4", plane));
  EXPECT_TRUE(math_equivalent("-5x+7y-11z-4=0", plane));
  EXPECT_FALSE(math_equivalent("5x-7y+11z+5=0", plane));
  EXPECT_FALSE(math_equivalent("5x-7y+11z+4", plane));  // an expression is not the equation
  EXPECT_FALSE(math_equivalent("10x-14y+22z+8=0", plane));  // a multiple: another answer, as in Qwen's grader
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

// Each subscripted name is a variable of its own (Minerva's `\omega_{d}`, `E_{1}`, `r_{0}`); a
// number's subscript is a base (MATH's `52_8`) and stays text.
TEST(MathEquivalent, SubscriptedVariablesAreTheirOwnVariables) {
  EXPECT_TRUE(math_equivalent("\\frac{E_1+2E_2}{3}", "\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}"));
  EXPECT_FALSE(math_equivalent("\\frac{2E_1+E_2}{3}", "\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}"));
  EXPECT_TRUE(math_equivalent("2r_0\\sqrt{\\pi G\\rho_0}", "\\sqrt{4 \\pi G \\rho_{0} r_{0}^{2}}"));
  EXPECT_FALSE(math_equivalent("2r_0\\sqrt{\\pi G\\rho}", "\\sqrt{4 \\pi G \\rho_{0} r_{0}^{2}}"));
  EXPECT_FALSE(math_equivalent("x_1", "x_0"));
  EXPECT_FALSE(math_equivalent("x", "x_0"));
  EXPECT_FALSE(math_equivalent("x_{1}2", "x_{12}"));  // x_1 times 2
  EXPECT_FALSE(math_equivalent("42_8", "52_8"));
  EXPECT_TRUE(math_equivalent("52_{8}", "52_8"));
  EXPECT_FALSE(math_equivalent("1A_{16}", "A_{16}"));  // 26, not 1 times the variable A_16
  EXPECT_TRUE(math_equivalent("2x_1", "2 x_{1}"));
  EXPECT_TRUE(math_equivalent("x_{99999999999}", "x_{99999999999}+0"));  // no int overflow reading it
}

// Functions evaluate as sympy's LaTeX parser reads them: arguments in parentheses or the products
// and quotients after the name, powers of the value, `^{-1}` the inverse, `\log` decimal or with a
// base, `\ln` natural.
TEST(MathEquivalent, FunctionsAreEvaluated) {
  EXPECT_TRUE(math_equivalent("\\frac12", "\\sin(\\pi/6)"));
  EXPECT_TRUE(math_equivalent("\\sin 2x", "2\\sin x\\cos x"));
  EXPECT_FALSE(math_equivalent("\\sin 2x", "2\\sin x"));
  EXPECT_TRUE(math_equivalent("1", "\\sin^2 x + \\cos^2 x"));
  EXPECT_TRUE(math_equivalent("\\arctan x", "\\tan^{-1} x"));
  EXPECT_TRUE(math_equivalent("\\cos(\\omega t)", "\\cos \\omega t"));  // not cos(omega) t
  EXPECT_FALSE(math_equivalent("\\cos(\\omega) t", "\\cos \\omega t"));
  EXPECT_TRUE(math_equivalent("\\frac{\\sin 3t}{5}", "\\sin(3t)/5"));  // not sin(3t/5)
  EXPECT_TRUE(math_equivalent("\\sin(x/2)", "\\sin x/2"));     // but this is, as sympy reads it
  EXPECT_TRUE(math_equivalent("\\cos(\\omega t)", "\\cos \\omega \\cdot t"));
  EXPECT_TRUE(math_equivalent("\\sin(x)\\cos(x)", "\\sin x \\cdot \\cos x"));
  EXPECT_TRUE(math_equivalent("3", "\\log_{2} 8"));
  EXPECT_TRUE(math_equivalent("\\frac{\\ln x}{\\ln b}", "\\log_b x"));
  EXPECT_FALSE(math_equivalent("\\ln 2", "\\log 2"));  // \log alone is decimal
  EXPECT_TRUE(math_equivalent("2", "\\log 100"));
  EXPECT_TRUE(math_equivalent("\\ln(x+\\sqrt{x^2+1})", "\\sinh^{-1} x"));  // arsinh, not 1/sinh
  EXPECT_FALSE(math_equivalent("\\csch x", "\\sinh^{-1} x"));
  // Equal only where x >= 0: the second round of points has both signs.
  EXPECT_FALSE(math_equivalent("\\arcsin\\sqrt{1-x^2}", "\\arccos x"));
  EXPECT_FALSE(math_equivalent("0.69", "\\ln 2"));
  EXPECT_FALSE(math_equivalent("\\exp(t)", "e^{t}"));  // `e` is a variable, as sympy reads it
  EXPECT_FALSE(math_equivalent("x", "\\sin x"));
  // A damped oscillator's answer (Minerva): \sqrt{1-\zeta^2} has a value only for zeta below 1.
  const char* damped =
      "\\omega_{n}^{2} e^{-\\zeta \\omega_{n} t} \\cos \\left(\\omega_{n} \\sqrt{1-\\zeta^{2}} t\\right)-"
      "\\frac{\\zeta \\omega_{n}^{2}}{\\sqrt{1-\\zeta^{2}}} e^{-\\zeta \\omega_{n} t} \\sin \\left(\\omega_{n} "
      "\\sqrt{1-\\zeta^{2}} t\\right)";
  EXPECT_TRUE(math_equivalent("\\omega_n^2 e^{-\\zeta\\omega_n t}(\\cos(\\omega_n\\sqrt{1-\\zeta^2}t) - "
                              "\\frac{\\zeta}{\\sqrt{1-\\zeta^2}}\\sin(\\omega_n\\sqrt{1-\\zeta^2}t))",
                              damped));
  EXPECT_FALSE(math_equivalent("\\omega_n^2 e^{-\\zeta\\omega_n t}(\\cos(\\omega_n\\sqrt{1-\\zeta^2}t) + "
                               "\\frac{\\zeta}{\\sqrt{1-\\zeta^2}}\\sin(\\omega_n\\sqrt{1-\\zeta^2}t))",
                               damped));
  // A chain of functions as deep as an answer can be has no value, and no crash.
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += "\\sin";
  EXPECT_FALSE(math_equivalent(deep + "x", "x"));
}

// Values compare as exact arithmetic has them (sympy's, in Qwen2.5-Math's grader): a value within
// its own rounding error of another equals it, so `\sin\pi` (1.2e-16 in doubles) is 0, and a value
// whose rounding error is larger than itself, at a pole, has none (sympy's zoo).
TEST(MathEquivalent, ValuesAreEqualWithinTheirRounding) {
  EXPECT_TRUE(math_equivalent("\\sin\\pi", "0"));
  EXPECT_TRUE(math_equivalent("0", "\\cos\\frac{\\pi}{2}"));
  EXPECT_TRUE(math_equivalent("\\tan\\frac{\\pi}{4}-1", "0"));
  EXPECT_TRUE(math_equivalent("\\sin 2x-2\\sin x\\cos x", "0"));  // identically 0
  EXPECT_TRUE(math_equivalent("\\sin^2 x+\\cos^2 x-1", "0"));
  EXPECT_FALSE(math_equivalent("\\sin 2x-\\sin x\\cos x", "0"));
  EXPECT_FALSE(math_equivalent("\\sin\\pi", "1"));
  // Small values are known to their last digits: no absolute slack.
  EXPECT_FALSE(math_equivalent("3\\times10^{-27}", "0"));
  EXPECT_FALSE(math_equivalent("8.4\\times10^{-12}", "7.4e-12"));
  EXPECT_TRUE(math_equivalent("8.4\\times10^{-12}", "8.4e-12"));
  // Only values 0 within their rounding meet that way; a tiny value is known to its digits.
  EXPECT_FALSE(math_equivalent("\\sin\\pi", "1e-20"));
  EXPECT_TRUE(math_equivalent("0.1+0.2-0.3", "0"));
  EXPECT_FALSE(math_equivalent("0.1+0.2-0.3", "6.6e-34"));
  // A small value that cancelled, off by 8e-5 of itself but well within its bound, meets its value.
  EXPECT_TRUE(math_equivalent("1-\\cos(10^{-6})", "5\\times10^{-13}"));
  EXPECT_FALSE(math_equivalent("1-\\cos(10^{-6})", "5.1\\times10^{-13}"));
  // Exact arithmetic stays exact: no bound to spoil a negative base or an inverse at its edge.
  EXPECT_TRUE(math_equivalent("(-2)^{1+2}", "-8"));
  EXPECT_TRUE(math_equivalent("(-3)^{5-3}", "9"));
  EXPECT_TRUE(math_equivalent("\\arccos(\\frac{2}{2})", "0"));
  EXPECT_TRUE(math_equivalent("1.5\\times10^{12}-1.5\\times10^{12}", "0"));
  EXPECT_TRUE(math_equivalent("\\sin(10^{10})", "\\sin(10000000000)+0"));
  // A value of unknown bound (the logarithm of a value that may be 0) stays unknown through
  // whatever follows.
  EXPECT_FALSE(math_equivalent("\\cos(2\\ln(\\sin\\pi))", "-0.5226951863224885"));
  EXPECT_FALSE(math_equivalent("\\exp(2\\ln\\sin\\pi)", "1.4997597826618576e-32"));
  EXPECT_FALSE(math_equivalent("\\sech(\\ln(\\sin\\pi))", "2.4e-16"));
  // At a pole: no value, so equal to nothing but the same text.
  EXPECT_FALSE(math_equivalent("\\tan\\frac{\\pi}{2}", "1.633123935319537e16"));
  EXPECT_FALSE(math_equivalent("\\tan\\frac{\\pi}{2}", "\\tan\\frac{\\pi}{2}+1"));
  EXPECT_FALSE(math_equivalent("\\frac{1}{\\sin\\pi}", "8.165619676597685e15"));
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
