// The warm start. Transcripts: every response is read back by the task engine's own parsers
// (proposer/parse.h, solver/extract.h) to exactly the task it came from, and every solver answer
// grades correct in the real sandbox (solver/grade.h). Training: azr-tiny memorises a small
// synthetic set (loss falls, greedy decoding reproduces the response and stops at eos), and the
// reported loss equals a hand computation from Transformer::score over the response tokens only.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bootstrap/transcripts.h"
#include "bootstrap/warm_start.h"
#include "buffer/task_jsonl.h"
#include "kernels/ops.h"
#include "model/byte_tokenizer.h"
#include "model/generate.h"
#include "model/presets.h"
#include "model/transformer.h"
#include "proposer/parse.h"
#include "proposer/prompts.h"
#include "sandbox/pool.h"
#include "solver/extract.h"
#include "solver/grade.h"
#include "solver/prompts.h"
#include "tests/test_support.h"

namespace azr::bootstrap {
namespace {

using buffer::Task;
using buffer::TaskType;

std::vector<Task> seed_tasks() {
  const std::string path = testing::env_or_fail("AZR_TESTS_DIR") + "/trainer/fixtures/seed_tasks.jsonl";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<Task> tasks;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    tasks.push_back(buffer::task_from_json(nlohmann::json::parse(line)));
  }
  return tasks;
}

// The other tasks of the same type, as the proposer's references (K <= 6).
std::vector<Task> references_for(const std::vector<Task>& tasks, size_t i) {
  std::vector<Task> refs;
  for (size_t j = 0; j < tasks.size() && refs.size() < 6; j++) {
    if (j != i && tasks[j].type == tasks[i].type) refs.push_back(tasks[j]);
  }
  return refs;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST(TranscriptTest, SeedFixtureHasEveryType) {
  const std::vector<Task> tasks = seed_tasks();
  ASSERT_EQ(tasks.size(), 13u);
  int n[3] = {0, 0, 0};
  for (const Task& t : tasks) n[static_cast<int>(t.type)]++;
  EXPECT_GT(n[0], 0);
  EXPECT_GT(n[1], 0);
  EXPECT_GT(n[2], 0);
}

TEST(TranscriptTest, ProposerResponsesParseBackToTheTask) {
  const std::vector<Task> tasks = seed_tasks();
  for (size_t i = 0; i < tasks.size(); i++) {
    const Task& t = tasks[i];
    SCOPED_TRACE("task " + std::to_string(i) + " (" + buffer::type_name(t.type) + ")");
    const std::vector<Task> refs = references_for(tasks, i);
    const Transcript tr = proposer_transcript(t, refs);
    EXPECT_TRUE(ends_with(tr.prompt, "<think>"));
    EXPECT_EQ(tr.response.find("<think>"), std::string::npos);
    if (t.type == TaskType::Induction) {
      const int n = static_cast<int>(t.inputs.size());
      EXPECT_EQ(tr.prompt, proposer::induction_proposer_prompt(t.program, n));
      proposer::ParseOptions o;
      o.num_inputs = n;
      const proposer::ParseResult r = proposer::parse_induction_proposal(tr.response, t.program, o);
      EXPECT_EQ(r.check.reason, "ok") << r.check.detail << "\n" << tr.response;
      EXPECT_TRUE(r.check.ok);
      EXPECT_EQ(r.proposal.type, TaskType::Induction);
      EXPECT_EQ(r.proposal.program, t.program);
      EXPECT_EQ(r.proposal.inputs, t.inputs);
      EXPECT_EQ(r.proposal.message, t.message);
    } else {
      EXPECT_EQ(tr.prompt, proposer::code_proposer_prompt(t.type, refs));
      const proposer::ParseResult r = proposer::parse_code_proposal(t.type, tr.response);
      EXPECT_EQ(r.check.reason, "ok") << r.check.detail << "\n" << tr.response;
      EXPECT_TRUE(r.check.ok);
      EXPECT_EQ(r.proposal.type, t.type);
      EXPECT_EQ(r.proposal.program, t.program);
      EXPECT_EQ(r.proposal.input, t.input);
    }
  }
}

TEST(TranscriptTest, RealProposerPromptsAreAboutTwoKilobytes) {
  const std::vector<Task> tasks = seed_tasks();
  const Transcript tr = proposer_transcript(tasks[0], references_for(tasks, 0));
  EXPECT_GT(tr.prompt.size(), 1000u);
  EXPECT_LT(tr.response.size(), 400u);
}

// Compact transcripts: the engine's compact prompts and the very same responses (which the test
// above parses back and the one below grades), at under half the prompt bytes.
TEST(TranscriptTest, CompactTranscriptsUseTheCompactPromptsWithTheSameResponses) {
  const std::vector<Task> tasks = seed_tasks();
  for (size_t i = 0; i < tasks.size(); i++) {
    const Task& t = tasks[i];
    SCOPED_TRACE("task " + std::to_string(i) + " (" + buffer::type_name(t.type) + ")");
    const std::vector<Task> refs = references_for(tasks, i);
    const Transcript paper = proposer_transcript(t, refs);
    const Transcript compact = proposer_transcript(t, refs, model::PromptStyle::Compact);
    EXPECT_EQ(compact.response, paper.response);
    if (t.type == TaskType::Induction) {
      EXPECT_EQ(compact.prompt, proposer::induction_proposer_prompt(t.program, int(t.inputs.size()),
                                                                    model::PromptStyle::Compact));
    } else {
      EXPECT_EQ(compact.prompt, proposer::code_proposer_prompt(t.type, refs, proposer::default_banned_words(),
                                                               model::PromptStyle::Compact));
    }
    EXPECT_LT(compact.prompt.size() * 2, paper.prompt.size());
    const Transcript solver_paper = solver_transcript(t);
    const Transcript solver_compact = solver_transcript(t, model::PromptStyle::Compact);
    EXPECT_EQ(solver_compact.response, solver_paper.response);
    EXPECT_EQ(solver_compact.prompt, solver::solver_prompt(t, model::PromptStyle::Compact));
    EXPECT_LT(solver_compact.prompt.size() * 2, solver_paper.prompt.size());
  }
}

TEST(TranscriptTest, DeductionAndAbductionProposersShareTheirThought) {
  EXPECT_EQ(proposer_thought(TaskType::Deduction), proposer_thought(TaskType::Abduction));
  EXPECT_NE(proposer_thought(TaskType::Deduction), proposer_thought(TaskType::Induction));
}

TEST(TranscriptTest, InductionWithoutInputsThrows) {
  Task t;
  t.type = TaskType::Induction;
  t.program = "def f(x):\n    return x";
  EXPECT_THROW(proposer_transcript(t, {}), std::invalid_argument);
}

TEST(TranscriptTest, SolverResponsesExtractAndGradeCorrectInTheSandbox) {
  const std::vector<Task> tasks = seed_tasks();
  std::vector<std::string> answers;
  for (size_t i = 0; i < tasks.size(); i++) {
    const Task& t = tasks[i];
    SCOPED_TRACE("task " + std::to_string(i) + " (" + buffer::type_name(t.type) + ")");
    const Transcript tr = solver_transcript(t);
    EXPECT_EQ(tr.prompt, solver::solver_prompt(t));
    EXPECT_TRUE(ends_with(tr.prompt, "<think>"));
    const solver::Extraction e = solver::extract_answer(t.type, tr.response);
    EXPECT_TRUE(e.format_ok) << e.reason << "\n" << tr.response;
    EXPECT_EQ(e.reason, "ok");
    EXPECT_EQ(e.source, "block");
    const std::string& expected =
        t.type == TaskType::Deduction ? t.output : (t.type == TaskType::Abduction ? t.input : t.program);
    EXPECT_EQ(e.answer, expected);
    answers.push_back(e.answer);
  }
  sandbox::PoolOptions po;
  po.workers = 2;
  sandbox::Pool pool(po);
  const std::vector<solver::Grade> g = solver::grade(pool, tasks, answers);
  ASSERT_EQ(g.size(), tasks.size());
  for (size_t i = 0; i < g.size(); i++) {
    EXPECT_TRUE(g[i].correct) << "task " << i << ": " << g[i].reason << " " << g[i].detail;
    EXPECT_EQ(g[i].reason, "ok");
  }
  // The grader is not vacuous: an answer from the wrong task is wrong.
  std::vector<std::string> shifted(answers.begin() + 1, answers.end());
  shifted.push_back(answers.front());
  const std::vector<solver::Grade> bad = solver::grade(pool, tasks, shifted);
  int wrong = 0;
  for (const solver::Grade& b : bad) wrong += b.correct ? 0 : 1;
  EXPECT_GT(wrong, 8);
}

// ---- training ----

struct TinyFixture {
  model::ByteTokenizer tok;
  model::Transformer m;
  int32_t eos;
  TinyFixture() : m(model::Transformer::random(model::preset_config("azr-tiny"), 7)) {
    kernels::set_cpu_threads(2);
    eos = *tok.token_to_id("<|endoftext|>");
  }
};

// Six short synthetic prompts with real-format deduction solver responses (~90 bytes each), so
// that memorising them fits the test's time budget on 2 cores.
std::vector<Transcript> synthetic_set() {
  const char* calls[6] = {"f(3)", "g('azr')", "h(2, 20)", "k([4, 9, -2, 7])", "m(6)", "n('mississippi')"};
  const char* outputs[6] = {"7", "'RZA'", "[3, 6, 9, 12, 15, 18]", "11", "55", "4"};
  std::vector<Transcript> out;
  for (int i = 0; i < 6; i++) {
    Transcript t;
    t.prompt = "Task " + std::to_string(i) + ": " + calls[i] + "\nAssistant: <think>";
    t.response = " Let me run the code on the input.\n</think>\n<answer>\n```output\n" + std::string(outputs[i]) +
                 "\n```\n</answer>";
    out.push_back(t);
  }
  return out;
}

TEST(WarmStartTest, EncodingMasksTheResponseAndEos) {
  TinyFixture fx;
  const Transcript t{"ab<think>", "cd</think>"};
  const EncodedTranscript e = encode_transcript(fx.tok, t, fx.eos);
  // "ab" + <think> | "cd" + </think> + eos
  ASSERT_EQ(e.ids.size(), 7u);
  EXPECT_EQ(e.prompt_tokens, 3);
  EXPECT_EQ(e.ids.back(), fx.eos);
  EXPECT_EQ(e.mask, (std::vector<float>{0, 0, 0, 1, 1, 1, 1}));
}

TEST(WarmStartTest, LearningRateWarmsUpThenDecaysToTenPercent) {
  WarmStartSettings s;
  s.steps = 100;
  s.lr = 1e-3;
  s.warmup_fraction = 0.05;
  EXPECT_NEAR(warm_start_lr(s, 0), 1e-3 / 5, 1e-12);
  EXPECT_NEAR(warm_start_lr(s, 4), 1e-3, 1e-12);
  EXPECT_NEAR(warm_start_lr(s, 5), 1e-3, 1e-12);
  EXPECT_NEAR(warm_start_lr(s, 99), 1e-4, 1e-12);
  for (int i = 5; i < 99; i++) EXPECT_GE(warm_start_lr(s, i), warm_start_lr(s, i + 1));
}

TEST(WarmStartTest, RejectsBadArguments) {
  TinyFixture fx;
  WarmStartSettings s;
  s.steps = 1;
  EXPECT_THROW(warm_start(fx.m, fx.tok, {}, fx.eos, s), std::invalid_argument);
  EXPECT_THROW(warm_start(fx.m, fx.tok, synthetic_set(), 1 << 20, s), std::invalid_argument);
  s.micro_batch_size = 0;
  EXPECT_THROW(warm_start(fx.m, fx.tok, synthetic_set(), fx.eos, s), std::invalid_argument);
}

// A step's loss, computed before its update, against mean(-logp) over the response and
// eos tokens from one Transformer::score of the whole set, built here independently of
// encode_transcript. The step uses micro-batches of 4 out of 6, so accumulation is checked too.
TEST(WarmStartTest, StepLossIsTheMeanOverResponseTokensOnly) {
  TinyFixture fx;
  const std::vector<Transcript> data = synthetic_set();
  {
    // A few steps first: at initialisation every token costs about log(V), prompt or not, and
    // the check below could not tell the masks apart.
    WarmStartSettings pre;
    pre.steps = 15;
    pre.batch_size = 6;
    pre.lr = 1e-2;
    warm_start(fx.m, fx.tok, data, fx.eos, pre);
  }
  std::vector<std::vector<int32_t>> seqs;
  std::vector<std::pair<size_t, size_t>> resp;  // [begin, end) of response + eos per sequence
  for (const Transcript& t : data) {
    std::vector<int32_t> p = fx.tok.encode(t.prompt), r = fx.tok.encode(t.response);
    std::vector<int32_t> s = p;
    s.insert(s.end(), r.begin(), r.end());
    s.push_back(fx.eos);
    resp.emplace_back(p.size(), s.size());
    seqs.push_back(s);
  }
  const model::SequenceBatch sb = model::SequenceBatch::from(seqs);
  const model::TokenScores sc = fx.m.score(sb);
  double resp_sum = 0, all_sum = 0;
  int64_t resp_n = 0, all_n = 0;
  for (size_t b = 0; b < seqs.size(); b++) {
    for (size_t t = 1; t < seqs[b].size(); t++) {
      const double nl = -sc.logp[b * static_cast<size_t>(sb.T) + t];
      all_sum += nl;
      all_n++;
      if (t >= resp[b].first) {
        resp_sum += nl;
        resp_n++;
      }
    }
  }
  const double expected = resp_sum / static_cast<double>(resp_n);
  const double with_prompt = all_sum / static_cast<double>(all_n);

  WarmStartSettings s;
  s.steps = 1;
  s.batch_size = 6;
  s.micro_batch_size = 4;
  const WarmStartStats st = warm_start(fx.m, fx.tok, data, fx.eos, s);
  ASSERT_EQ(st.loss.size(), 1u);
  EXPECT_NEAR(st.loss[0], expected, 1e-4 * expected);
  EXPECT_GT(std::fabs(with_prompt - expected), 0.1) << "prompt tokens would not be distinguishable";
  EXPECT_EQ(st.trained_tokens, resp_n);
  EXPECT_EQ(st.processed_tokens, all_n + static_cast<int64_t>(seqs.size()));
}

TEST(WarmStartTest, MemorisesASmallSetAndStopsAtEos) {
  TinyFixture fx;
  const std::vector<Transcript> data = synthetic_set();
  WarmStartSettings s;
  s.steps = 150;  // ~20 s on 2 free cores
  s.batch_size = 6;
  s.micro_batch_size = 6;
  s.lr = 1e-2;
  s.seed = 1;
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const WarmStartStats st = warm_start(fx.m, fx.tok, data, fx.eos, s, [&](int step, double) { EXPECT_EQ(step, calls++); });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(calls, s.steps);
  ASSERT_EQ(st.loss.size(), static_cast<size_t>(s.steps));
  std::printf("warm start: loss %.4f -> %.4f in %d steps, %.0f tokens/s, %.1f s\n", st.loss.front(), st.loss.back(),
              s.steps, st.tokens_per_s, secs);
  EXPECT_LT(st.loss.back(), 0.5 * st.loss.front());
  EXPECT_GT(st.tokens_per_s, 0);

  // Greedy decoding from each training prompt. Every completion has the learnt format; most are
  // the exact response followed by eos (observed: 4 of 6 at 150 steps, 5 at 200; the tiny model
  // needs many steps to tie each prompt to its own output literal).
  const std::string shared = " Let me run the code on the input.\n</think>\n<answer>\n```output\n";
  int exact = 0;
  for (size_t i = 0; i < data.size(); i++) {
    std::vector<int32_t> want = fx.tok.encode(data[i].response);
    want.push_back(fx.eos);
    model::SamplingParams p;
    p.temperature = 0;
    p.max_new_tokens = static_cast<int32_t>(want.size()) + 8;
    p.stop_token_ids = {fx.eos};
    p.vocab_limit = static_cast<int64_t>(fx.tok.vocab_size());
    const std::vector<model::Completion> c = model::generate(fx.m, {fx.tok.encode(data[i].prompt)}, p, &fx.tok);
    ASSERT_EQ(c.size(), 1u);
    const std::string text = fx.tok.decode_bytes(c[0].tokens);
    EXPECT_EQ(text.substr(0, shared.size()), shared) << "transcript " << i;
    if (c[0].tokens == want) {
      exact++;
      EXPECT_EQ(c[0].finish, model::FinishReason::StopToken);
    } else {
      std::printf("transcript %zu not reproduced exactly:\n%s\n", i, text.c_str());
    }
  }
  std::printf("exactly reproduced (response + eos): %d of %zu\n", exact, data.size());
  EXPECT_GE(exact, 3);
}

}  // namespace
}  // namespace azr::bootstrap
