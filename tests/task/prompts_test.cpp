// Proposer and solver prompts: R1-wrapped, carrying the reference triples, the banned words and
// the required blocks; the induction solver prompt shows exactly the given half.
#include <gtest/gtest.h>

#include "model/chat_format.h"
#include "proposer/parse.h"
#include "proposer/prompts.h"
#include "solver/prompts.h"

using azr::buffer::Task;
using azr::buffer::TaskType;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void expect_r1(const std::string& p) {
  EXPECT_EQ(p.rfind(std::string(azr::model::kR1Prefix), 0), 0u) << "must start with the R1 prefix";
  const std::string suffix = "Assistant: <think>";
  ASSERT_GE(p.size(), suffix.size());
  EXPECT_EQ(p.substr(p.size() - suffix.size()), suffix);
}

// Compact prompts (model/chat_format.h): "User: " + body + "\nAssistant: <think>", no R1 preamble.
void expect_compact(const std::string& p) {
  EXPECT_EQ(p.rfind("User: ", 0), 0u) << "must start with 'User: '";
  EXPECT_FALSE(contains(p, std::string(azr::model::kR1Prefix)));
  const std::string suffix = "\nAssistant: <think>";
  ASSERT_GE(p.size(), suffix.size());
  EXPECT_EQ(p.substr(p.size() - suffix.size()), suffix);
}

using azr::model::PromptStyle;
constexpr PromptStyle kStyles[2] = {PromptStyle::Paper, PromptStyle::Compact};

void expect_wrapped(const std::string& p, PromptStyle style) {
  if (style == PromptStyle::Paper) {
    expect_r1(p);
  } else {
    expect_compact(p);
  }
}

Task triple(TaskType type, std::string program, std::string input, std::string output) {
  Task t;
  t.type = type;
  t.program = std::move(program);
  t.input = std::move(input);
  t.output = std::move(output);
  return t;
}

std::vector<Task> references(TaskType type) {
  return {triple(type, "def f(a):\n    return a", "'Hello world'", "'Hello world'"),
          triple(type, "def f(xs):\n    return sorted(set(xs))[::-1]", "[3, 1, 3, 2]", "[3, 2, 1]"),
          triple(type, "class Acc:\n    pass\n\ndef f(s, k):\n    return {c: s.count(c) * k for c in s}",
                 "'aab', 2", "{'a': 4, 'b': 2}")};
}

TEST(ProposerPrompt, DeductionAndAbductionCarryReferencesBannedWordsAndFormat) {
  for (TaskType type : {TaskType::Deduction, TaskType::Abduction}) {
    const auto refs = references(type);
    const std::string p = azr::proposer::code_proposer_prompt(type, refs);
    expect_r1(p);
    for (size_t k = 0; k < refs.size(); ++k) {
      const std::string tag = "snippet_" + std::to_string(k);
      EXPECT_TRUE(contains(p, "<" + tag + ">\n```python\n" + refs[k].program + "\n```")) << tag;
      EXPECT_TRUE(contains(p, "```input\n" + refs[k].input + "\n```")) << tag;
      EXPECT_TRUE(contains(p, "```output\n" + refs[k].output + "\n```\n</" + tag + ">")) << tag;
    }
    EXPECT_FALSE(contains(p, "<snippet_3>"));
    EXPECT_TRUE(contains(p, "logging, random, multiprocessing, pebble, subprocess, threading, datetime, time, "
                            "hashlib, hmac, bcrypt, calendar"));
    EXPECT_TRUE(contains(p, "```python\n"));
    EXPECT_TRUE(contains(p, "```input\n'John', {'age': 20, 'city': 'New York'}\n```"));
    EXPECT_TRUE(contains(p, "`f`"));
  }
}

TEST(ProposerPrompt, DifficultyCriterionNamesWhatTheSolverPredicts) {
  // azr fixes the reference's swapped criterion (azr-reference §3.2 quirk).
  const std::string ded = azr::proposer::code_proposer_prompt(TaskType::Deduction, references(TaskType::Deduction));
  const std::string abd = azr::proposer::code_proposer_prompt(TaskType::Abduction, references(TaskType::Abduction));
  EXPECT_TRUE(contains(ded, "Difficulty in predicting its output"));
  EXPECT_TRUE(contains(abd, "Difficulty in predicting your input"));
}

// What the prompt asks for is what validation enforces: the sandbox's CPU budget (the sandbox's
// default, 2 s, unless given) and literal inputs (`list(range(3))` is input_not_literal).
TEST(ProposerPrompt, StatesTheSandboxLimitAndLiteralInputs) {
  const auto refs = references(TaskType::Deduction);
  EXPECT_TRUE(contains(azr::proposer::code_proposer_prompt(TaskType::Deduction, refs), "finish in under 2 seconds"));
  const std::string half = azr::proposer::code_proposer_prompt(
      TaskType::Deduction, refs, azr::proposer::default_banned_words(), azr::model::PromptStyle::Paper, 0.5);
  EXPECT_TRUE(contains(half, "finish in under 0.5 seconds"));
  EXPECT_FALSE(contains(half, "10 seconds"));
  for (const std::string& p : {half, azr::proposer::induction_proposer_prompt("def f(x):\n    return x", 10)})
    EXPECT_TRUE(contains(p, "Use Python literals only")) << p;
}

// Validation refuses a second `def` anywhere (multiple_defs, -1): a helper, a method, a nested
// function. The reference's wording invited nested functions and classes; this one asks for one
// function definition.
TEST(ProposerPrompt, AsksForTheOneDefinitionValidationTakes) {
  const std::string nested =
      "```python\ndef f(xs):\n    def sq(v):\n        return v * v\n    return [sq(x) for x in xs]\n"
      "```\n```input\n[1, 2]\n```";
  const std::string generation = "<think>.</think><answer>" + nested + "</answer>";
  ASSERT_EQ(azr::proposer::parse_code_proposal(TaskType::Deduction, generation).check.reason, "multiple_defs");
  for (TaskType type : {TaskType::Deduction, TaskType::Abduction}) {
    const std::string p = azr::proposer::code_proposer_prompt(type, references(type));
    EXPECT_TRUE(contains(p, "exactly one function definition")) << p;
    EXPECT_FALSE(contains(p, "nested functions are allowed")) << p;
    EXPECT_FALSE(contains(p, "classes are allowed")) << p;
  }
}

TEST(ProposerPrompt, CustomBannedWordsAreListed) {
  const std::string p =
      azr::proposer::code_proposer_prompt(TaskType::Deduction, references(TaskType::Deduction), {"socket", "ctypes"});
  EXPECT_TRUE(contains(p, "socket, ctypes"));
  EXPECT_FALSE(contains(p, "hashlib"));
}

TEST(ProposerPrompt, InductionShowsTheProgramWithThePlugSuffix) {
  const std::string program = "def f(n):\n    return [i * i for i in range(n)]";
  const std::string p = azr::proposer::induction_proposer_prompt(program, 10);
  expect_r1(p);
  EXPECT_TRUE(contains(p, "```python\n" + program + "\nf(<|YOUR INPUT WILL BE PLUGGED HERE|>)\n```"));
  EXPECT_TRUE(contains(p, "Output 10 Inputs"));
  EXPECT_TRUE(contains(p, "```message"));
  EXPECT_TRUE(contains(azr::proposer::induction_proposer_prompt(program, 4), "Output 4 Inputs"));
}

TEST(ProposerPrompt, CompactCarriesTheReferencesAndNamesWhatTheSolverPredicts) {
  for (TaskType type : {TaskType::Deduction, TaskType::Abduction}) {
    const auto refs = references(type);
    const std::string p =
        azr::proposer::code_proposer_prompt(type, refs, azr::proposer::default_banned_words(), PromptStyle::Compact);
    expect_compact(p);
    for (size_t k = 0; k < refs.size(); ++k) {
      const std::string tag = "snippet_" + std::to_string(k);
      EXPECT_TRUE(contains(p, "<" + tag + ">\n```python\n" + refs[k].program + "\n```")) << tag;
      EXPECT_TRUE(contains(p, "```output\n" + refs[k].output + "\n```\n</" + tag + ">")) << tag;
    }
    EXPECT_TRUE(contains(p, "```python block and an ```input block"));
    // The type is in the first line: what a tiny model has to condition on.
    const std::string first_line = p.substr(0, p.find('\n'));
    EXPECT_TRUE(contains(first_line, type == TaskType::Deduction ? "deduce its output" : "deduce an input from its output"))
        << first_line;
    // Without the references, well under a quarter of the paper prompt's instructions.
    const std::string paper = azr::proposer::code_proposer_prompt(type, {});
    const std::string compact =
        azr::proposer::code_proposer_prompt(type, {}, azr::proposer::default_banned_words(), PromptStyle::Compact);
    EXPECT_LT(compact.size() * 4, paper.size()) << compact.size() << " vs " << paper.size();
  }
}

TEST(ProposerPrompt, CompactInductionShowsTheProgramAndTheCount) {
  const std::string program = "def f(n):\n    return [i * i for i in range(n)]";
  const std::string p = azr::proposer::induction_proposer_prompt(program, 6, PromptStyle::Compact);
  expect_compact(p);
  EXPECT_TRUE(contains(p, "```python\n" + program + "\n```\n"));
  EXPECT_TRUE(contains(p, "Give 6 different inputs"));
  EXPECT_TRUE(contains(p, "```message"));
}

TEST(PromptStyle, NamesRoundTripAndUnknownNamesThrow) {
  for (PromptStyle style : kStyles) EXPECT_EQ(azr::model::parse_prompt_style(azr::model::prompt_style_name(style)), style);
  EXPECT_THROW(azr::model::parse_prompt_style("short"), std::invalid_argument);
  EXPECT_THROW(azr::model::parse_prompt_style(""), std::invalid_argument);
}

TEST(SolverPrompt, DeductionShowsProgramAndInputAndAsksForOutput) {
  Task t = triple(TaskType::Deduction, "def f(s):\n    return s[::-1] + 'é'", "'naïve'", "'evïané'");
  for (PromptStyle style : kStyles) {
  SCOPED_TRACE(std::string(azr::model::prompt_style_name(style)));
  const std::string p = azr::solver::solver_prompt(t, style);
  expect_wrapped(p, style);
  EXPECT_TRUE(contains(p, "```python\n" + t.program + "\n```"));
  EXPECT_TRUE(contains(p, "```input\n" + t.input + "\n```"));
  EXPECT_TRUE(contains(p, "```output"));
  EXPECT_FALSE(contains(p, t.output));  // the answer is not in the prompt
  }
}

TEST(SolverPrompt, AbductionShowsProgramAndOutputAndAsksForInput) {
  Task t = triple(TaskType::Abduction, "def f(a, b):\n    return a * b", "6, 7", "42");
  for (PromptStyle style : kStyles) {
  SCOPED_TRACE(std::string(azr::model::prompt_style_name(style)));
  const std::string p = azr::solver::solver_prompt(t, style);
  expect_wrapped(p, style);
  EXPECT_TRUE(contains(p, "```python\n" + t.program + "\n```"));
  EXPECT_TRUE(contains(p, "```output\n42\n```"));
  EXPECT_TRUE(contains(p, "```input"));
  EXPECT_FALSE(contains(p, "6, 7"));
  }
  // Graded in the literal mode, so the paper-style prompt says so, as the proposer's does.
  EXPECT_TRUE(contains(azr::solver::solver_prompt(t, PromptStyle::Paper), "as a Python literal"));
}

TEST(SolverPrompt, InductionShowsExactlyTheFirstHalfAndNeverTheProgram) {
  Task t;
  t.type = TaskType::Induction;
  t.program = "def f(x):\n    return x * 3 + 100";
  t.message = "Triple it, then add a hundred.";
  for (int k = 0; k < 10; ++k) {
    t.inputs.push_back(std::to_string(1000 + k));
    t.outputs.push_back(std::to_string((1000 + k) * 3 + 100));
  }
  for (PromptStyle style : kStyles) {
  SCOPED_TRACE(std::string(azr::model::prompt_style_name(style)));
  const std::string p = azr::solver::solver_prompt(t, style);
  expect_wrapped(p, style);
  EXPECT_EQ(azr::solver::induction_given_count(t), 5u);
  for (int k = 0; k < 5; ++k) {
    const std::string i = std::to_string(k);
    EXPECT_TRUE(contains(p, "```input_" + i + "\n" + t.inputs[k] + "\n```")) << k;
    EXPECT_TRUE(contains(p, "```output_" + i + "\n" + t.outputs[k] + "\n```")) << k;
  }
  for (int k = 5; k < 10; ++k) {
    EXPECT_FALSE(contains(p, t.inputs[k])) << k;
    EXPECT_FALSE(contains(p, t.outputs[k])) << k;
    EXPECT_FALSE(contains(p, "input_" + std::to_string(k))) << k;
  }
  EXPECT_FALSE(contains(p, t.program));
  EXPECT_FALSE(contains(p, "x * 3 + 100"));
  EXPECT_TRUE(contains(p, "```message\n" + t.message + "\n```"));
  EXPECT_TRUE(contains(p, "```python"));
  }
}

TEST(SolverPrompt, InductionSeedWithSixPairsShowsThree) {
  Task t;
  t.type = TaskType::Induction;
  t.program = "def f(a):\n    return a";
  t.message = "identity";
  for (int k = 0; k < 6; ++k) t.inputs.push_back("'in" + std::to_string(k) + "'"), t.outputs.push_back("'in" + std::to_string(k) + "'");
  const std::string p = azr::solver::solver_prompt(t);
  EXPECT_TRUE(contains(p, "```input_2\n'in2'\n```"));
  EXPECT_FALSE(contains(p, "'in3'"));
}

}  // namespace
