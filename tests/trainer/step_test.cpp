// One self-play step in process, with the real sandbox, a real SQLite buffer, a real (tiny)
// model for the update and a scripted sampler for the responses: a new model never writes a
// valid task, and the paths that matter here (validation, learnability, insertion, grading,
// rewards, TRR++, the solve-order switch) only run when some are. Every expected number below
// is derived by hand from the scripted responses and METHOD.md's rules.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "buffer/task_buffer.h"
#include "model/byte_tokenizer.h"
#include "model/presets.h"
#include "proposer/seed.h"
#include "sandbox/pool.h"
#include "trainer/config.h"
#include "trainer/dist.h"
#include "trainer/policy.h"
#include "trainer/seeds.h"
#include "trainer/step.h"

namespace {

namespace fs = std::filesystem;
using azr::buffer::Task;
using azr::buffer::TaskType;
using namespace azr::trainer;

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

const std::string kIdentityInduction = [] {
  std::string s = "I pick ten inputs.\n</think>\n<answer>\n";
  for (const char* in : {"1", "'a'", "[1, 2]", "2.5", "None", "(3, 4)", "'zz'", "-7", "{'k': 1}", "True"})
    s += std::string("```input\n") + in + "\n```\n";
  return s + "```message\nIt gives back what it gets.\n```\n</answer>";
}();

std::string answer(const std::string& block, const std::string& body) {
  return "Thinking.\n</think>\n<answer>\n```" + block + "\n" + body + "\n```\n</answer>";
}

// What the scripted "model" writes, by prompt kind and position. Learnability rollouts see the
// solver prompt of a new task; `rollout` counts them per task in call order.
struct Script {
  std::map<std::string, int> rollouts_seen;  // prompt -> rollouts answered so far
  std::vector<std::vector<uint64_t>> seeds_by_call;

  std::string respond(const std::string& prompt, size_t position_in_call, int B) {
    // Proposer prompts come in one call, in global order: B deduction, B abduction, B induction.
    if (has(prompt, "must deduce the output"))  // deduction proposer
      return position_in_call % size_t(B) == 0
                 ? "I add one.\n</think>\n<answer>\n```python\ndef f(x):\n    return x + 1\n```\n```input\n4\n```\n</answer>"
                 : "I have no idea.";  // no <answer>
    if (has(prompt, "must deduce an input"))  // abduction proposer
      return position_in_call % size_t(B) == 0
                 ? "Doubling.\n</think>\n<answer>\n```python\ndef f(s):\n    return s * 2\n```\n```input\n'ab'\n```\n</answer>"
                 : "Random.\n</think>\n<answer>\n```python\nimport random\ndef f(x):\n    return x\n```\n```input\n1\n```\n</answer>";
    if (has(prompt, "## Task: Output 10 Inputs"))  // induction proposer
      return position_in_call % size_t(B) == 0 ? kIdentityInduction
                                                : "Two only.\n</think>\n<answer>\n```input\n1\n```\n```input\n2\n```\n```message\nm\n```\n</answer>";
    const int seen = rollouts_seen[prompt]++;
    if (has(prompt, "# Task: Deduce the Output")) {
      // The new task (x + 1 on 4): right on even rollouts, so 2 of 4. Rollouts 2 and 3 lack the
      // </think>: learnability grades an answer whatever its format (the reference's estimate), so
      // rollout 2 still counts as solved. The identity seed: right.
      if (has(prompt, "return x + 1")) {
        const std::string body = seen % 2 == 0 ? "5" : "6";
        if (seen % 4 < 2) return answer("output", body);
        return "Thinking.\n<answer>\n```output\n" + body + "\n```\n</answer>";
      }
      return answer("output", "'Hello world'");
    }
    if (has(prompt, "# Task: Provide One Possible Input")) {
      // The new task (s * 2 -> 'abab'): always right. The identity seed: wrong.
      if (has(prompt, "return s * 2")) return answer("input", "'ab'");
      return answer("input", "'Goodbye'");
    }
    if (has(prompt, "# Task: Deduce the Function")) return "No answer tags at all.";
    ADD_FAILURE() << "unexpected prompt: " << prompt.substr(0, 200);
    return "";
  }
};

class StepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("azr-step-test-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    cfg_.run.seed = 11;
    cfg_.model.preset = "azr-tiny";
    cfg_.algorithm.batch_size = 2;
    cfg_.algorithm.k_references = 1;
    cfg_.algorithm.learnability_rollouts = 4;
    cfg_.algorithm.max_prompt_tokens = 4096;
    cfg_.algorithm.max_response_tokens = 512;
    cfg_.algorithm.lr = 1e-3;
    cfg_.sandbox.workers = 2;
    buffer_.emplace(azr::buffer::TaskBuffer::open((dir_ / "buffer.db").string(),
                                                  azr::buffer::TaskBuffer::Mode::ReadWrite));
    buffer_->insert(azr::proposer::identity_seeds());
    pool_ = std::make_unique<azr::sandbox::Pool>(azr::sandbox::PoolOptions{.workers = 2});
    policy_ = std::make_unique<Policy>(
        azr::model::Transformer::random(azr::model::preset_config("azr-tiny"), 3),
        std::make_unique<azr::model::ByteTokenizer>(), azr::model::AdamWSettings{.lr = 1e-3});
  }
  void TearDown() override { fs::remove_all(dir_); }

  StepResult run(int64_t step) {
    StepContext ctx{cfg_, *policy_, *pool_, comm_, &*buffer_, &rng_, {}, {}, {}};
    ctx.sampler = [&](const std::vector<std::vector<int32_t>>& prompts, const std::vector<uint64_t>& seeds,
                      const azr::model::SamplingParams&) {
      script_.seeds_by_call.push_back(seeds);
      std::vector<azr::model::Completion> out;
      for (size_t i = 0; i < prompts.size(); i++) {
        const std::string text = script_.respond(policy_->tokenizer().decode(prompts[i]), i, cfg_.algorithm.batch_size);
        azr::model::Completion c;
        c.text = text;
        c.tokens = policy_->encode(text);
        c.tokens.push_back(256);  // <|endoftext|>, kept as the last token
        c.logprobs.assign(c.tokens.size(), -5.5f);
        c.finish = azr::model::FinishReason::StopToken;
        out.push_back(std::move(c));
      }
      return out;
    };
    return run_step(ctx, step);
  }

  // Response tokens of a scripted text (+ the stop token).
  int64_t tokens_of(const std::string& text) const { return int64_t(policy_->encode(text).size()) + 1; }

  fs::path dir_;
  TrainConfig cfg_;
  std::optional<azr::buffer::TaskBuffer> buffer_;
  std::unique_ptr<azr::sandbox::Pool> pool_;
  std::unique_ptr<Policy> policy_;
  dist::SingleCommunicator comm_;
  std::mt19937_64 rng_{5};
  Script script_;
};

TEST_F(StepTest, ValidatesEstimatesLearnabilityRewardsAndInserts) {
  const StepResult r = run(1);
  ASSERT_EQ(r.proposer.size(), 6u);
  // Item order: deduction 0, 1; abduction 0, 1; induction 0, 1.
  const std::vector<bool> valid = {true, false, true, false, true, false};
  const std::vector<std::string> reason = {"ok", "no_answer", "ok", "banned_import", "ok", "too_few_inputs"};
  for (size_t i = 0; i < 6; i++) {
    EXPECT_EQ(r.proposer[i].valid, valid[i]) << i;
    EXPECT_EQ(r.proposer[i].reason, reason[i]) << i;
  }
  // Learnability: deduction 2 of 4 -> a = 0.5 -> reward 1 - a = 0.5; abduction 4 of 4 -> a = 1 ->
  // -0.5 (the reference's value); induction: the solver never answers in format -> a = 0 -> -0.5.
  // Invalid proposals: -1.
  EXPECT_EQ(r.proposer[0].learn_n, 4);
  EXPECT_EQ(r.proposer[0].learn_k, 2);
  EXPECT_EQ(r.proposer[2].learn_k, 4);
  EXPECT_EQ(r.proposer[4].learn_k, 0);
  const std::vector<double> prop_reward = {0.5, -1, -0.5, -1, -0.5, -1};
  for (size_t i = 0; i < 6; i++) EXPECT_DOUBLE_EQ(r.proposer[i].reward, prop_reward[i]) << i;

  // The buffer holds the three valid tasks, made at step 1, with their learnability recorded.
  const azr::buffer::Counts c = buffer_->counts();
  EXPECT_EQ(c.by_type[0], 2);
  EXPECT_EQ(c.by_type[1], 2);
  EXPECT_EQ(c.by_type[2], 2);
  EXPECT_EQ(r.inserted.inserted, 3);
  const auto added = buffer_->get(r.inserted.ids[0]);
  ASSERT_TRUE(added);
  EXPECT_EQ(added->program, "def f(x):\n    return x + 1");
  EXPECT_EQ(added->output, "5");  // computed by the sandbox
  EXPECT_EQ(added->step, 1);
  ASSERT_TRUE(added->learnability);
  EXPECT_DOUBLE_EQ(*added->learnability, 0.5);
  EXPECT_EQ(buffer_->get(r.inserted.ids[1])->output, "'abab'");
  EXPECT_EQ(buffer_->get(r.inserted.ids[2])->outputs.size(), 10u);

  // Lagged (the default): at step 1 the solver sees only step-0 tasks (the identity seeds,
  // repeated to fill the batch). Deduction right (1), abduction wrong (-0.5), induction out of
  // format (-1).
  ASSERT_EQ(r.solver.size(), 6u);
  const std::vector<double> solve_reward = {1, 1, -0.5, -0.5, -1, -1};
  for (size_t i = 0; i < 6; i++) {
    EXPECT_DOUBLE_EQ(r.solver[i].reward, solve_reward[i]) << i;
    EXPECT_EQ(buffer_->get(r.solver[i].task_id)->step, 0) << i;
  }
  EXPECT_TRUE(r.solver[0].correct);
  EXPECT_EQ(r.solver[2].reason, "wrong");
  EXPECT_FALSE(r.solver[4].format_ok);
}

// A kept proposer rollout's format_ok is the R1 structure itself. It was "not the reason
// 'format'", and the parse stops at its first failure before the format check, so a response with
// no <answer> at all was kept as well formatted.
TEST_F(StepTest, KeptProposerRolloutsSayWhetherTheFormatHeld) {
  cfg_.buffer.rollout_retention_steps = 1;
  azr::buffer::Options keep;
  keep.rollout_retention_steps = 1;
  buffer_.reset();
  buffer_.emplace(azr::buffer::TaskBuffer::open((dir_ / "buffer.db").string(),
                                                azr::buffer::TaskBuffer::Mode::ReadWrite, keep));
  run(1);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(buffer_->handle(), "SELECT format_ok FROM rollouts WHERE role = 'proposer' ORDER BY id",
                               -1, &q, nullptr),
            SQLITE_OK);
  std::vector<int> format_ok;
  while (sqlite3_step(q) == SQLITE_ROW) format_ok.push_back(sqlite3_column_int(q, 0));
  sqlite3_finalize(q);
  // Deduction: valid, then "I have no idea." (no_answer); abduction: valid, then banned_import in
  // good form; induction: valid, then too_few_inputs in good form.
  EXPECT_EQ(format_ok, (std::vector<int>{1, 0, 1, 1, 1, 1}));
}

TEST_F(StepTest, AdvantagesAreWhitenedPerTaskAndRole) {
  // Same-step order, so a solver group mixes rewards: the new abduction task (right, 1) beside the
  // identity seed (wrong, -0.5). Lagged, step 1's solver groups see only seeds, each group's
  // rewards equal, and the whitening of a solver group would go unchecked.
  cfg_.algorithm.solve_order = "same-step";
  const StepResult r = run(1);
  // Each group has two sequences; whitening over tokens (token-count-weighted mean, unbiased
  // variance over all response tokens of the group, eps 1e-8), computed here from the lengths.
  auto expect_group = [&](const std::vector<double>& rewards, const std::vector<int64_t>& lens,
                          const std::vector<double>& got, const char* what) {
    double n = 0, mu = 0;
    for (size_t i = 0; i < rewards.size(); i++) n += double(lens[i]), mu += double(lens[i]) * rewards[i];
    mu /= n;
    double var = 0;
    for (size_t i = 0; i < rewards.size(); i++) var += double(lens[i]) * (rewards[i] - mu) * (rewards[i] - mu);
    var /= (n - 1);
    for (size_t i = 0; i < rewards.size(); i++)
      EXPECT_NEAR(got[i], (rewards[i] - mu) / std::sqrt(var + 1e-8), 1e-9) << what << " " << i;
  };
  int solver_groups_whitened = 0;
  for (int g = 0; g < 3; g++) {
    std::vector<double> rw, adv, srw, sadv;
    std::vector<int64_t> len, slen;
    for (size_t i = size_t(2 * g); i < size_t(2 * g + 2); i++) {
      rw.push_back(r.proposer[i].reward), len.push_back(r.proposer[i].response_tokens);
      adv.push_back(r.proposer_advantages[i]);
      srw.push_back(r.solver[i].reward), slen.push_back(r.solver[i].response_tokens);
      sadv.push_back(r.solver_advantages[i]);
    }
    expect_group(rw, len, adv, "proposer");
    if (srw[0] == srw[1]) {
      EXPECT_EQ(sadv[0], 0.0);  // equal rewards: no signal
      EXPECT_EQ(sadv[1], 0.0);
    } else {
      expect_group(srw, slen, sadv, "solver");
      solver_groups_whitened++;
    }
  }
  EXPECT_EQ(solver_groups_whitened, 1);  // abduction's
  // Response lengths are the scripted texts' bytes plus the stop token.
  EXPECT_EQ(r.proposer[1].response_tokens, tokens_of("I have no idea."));
  // The update trained on every response token of the step.
  int64_t total = 0;
  for (const auto& o : r.proposer) total += o.response_tokens;
  for (const auto& o : r.solver) total += o.response_tokens;
  EXPECT_DOUBLE_EQ(r.update.tokens, double(total));
  EXPECT_GT(r.update.grad_norm, 0);
}

TEST_F(StepTest, SameStepOrderSolvesTheNewTasksFirst) {
  cfg_.algorithm.solve_order = "same-step";
  const StepResult r = run(1);
  ASSERT_EQ(r.solver.size(), 6u);
  // Newest first: the step's new deduction and abduction tasks lead their solver groups.
  EXPECT_EQ(r.solver[0].task_id, r.inserted.ids[0]);
  EXPECT_EQ(r.solver[2].task_id, r.inserted.ids[1]);
  EXPECT_EQ(r.solver[4].task_id, r.inserted.ids[2]);
  EXPECT_DOUBLE_EQ(r.solver[2].reward, 1.0);  // the scripted solver gets 'ab' right
}

TEST_F(StepTest, SamplingSeedsDependOnTheItemNotTheCall) {
  run(1);
  ASSERT_GE(script_.seeds_by_call.size(), 3u);
  // The proposer call: item i gets derive_seed(seed, step, Propose, i).
  const auto& prop = script_.seeds_by_call[0];
  ASSERT_EQ(prop.size(), 6u);
  for (uint64_t i = 0; i < 6; i++)
    EXPECT_EQ(prop[i], derive_seed(cfg_.run.seed, {1, uint64_t(SeedPhase::Propose), i}));
  // The solver call is the last one.
  const auto& solve = script_.seeds_by_call.back();
  ASSERT_EQ(solve.size(), 6u);
  for (uint64_t i = 0; i < 6; i++) EXPECT_EQ(solve[i], derive_seed(cfg_.run.seed, {1, uint64_t(SeedPhase::Solve), i}));
}

// The scripted sampler reports -5.5 for every token, not the model's log-prob: as it is with
// top-p = 1, where the sampler's log-probs are the policy's; replaced by the learner's own under
// top-p or top-k, whose sampler reports the truncated distribution's (trainer/policy.h).
TEST_F(StepTest, TruncatedSamplingTrainsAgainstTheLearnersOwnLogProbs) {
  EXPECT_NE(run(1).update.approx_kl, 0.0);
  cfg_.algorithm.top_p = 0.9;
  const StepResult r = run(2);
  EXPECT_GT(r.update.tokens, 0.0);
  EXPECT_EQ(r.update.approx_kl, 0.0);
  EXPECT_EQ(r.update.clip_fraction, 0.0);
  cfg_.algorithm.top_p = 1.0;
  cfg_.algorithm.top_k = 20;
  const StepResult k = run(3);
  EXPECT_GT(k.update.tokens, 0.0);
  EXPECT_EQ(k.update.approx_kl, 0.0);
}

// A result the sandbox lost (internal_error: a worker died, not the program's doing) is masked,
// as the reference drops such results from its learnability mean, never punished. The pool's
// fault injection (sandbox/pool.h) loses three chosen kinds of job; each expectation below is
// what the first test's numbers become with those results taken out.
TEST_F(StepTest, SandboxFailuresAreMaskedNotPunished) {
  auto has_input = [](const azr::sandbox::Job& j, const std::string& in) {
    for (const std::string& i : j.inputs)
      if (i == in) return true;
    return false;
  };
  pool_ = std::make_unique<azr::sandbox::Pool>(azr::sandbox::PoolOptions{
      .workers = 2, .inject_fault = [has_input](const azr::sandbox::Job& j) {
        // The abduction proposal's validation runs; the wrong learnability answer "6" to the new
        // deduction task (its parse job and the retry alone); the solver's abduction answer.
        return has(j.program, "return s * 2") ||
               (j.op == azr::sandbox::protocol::Op::ParseLiterals && has_input(j, "6")) ||
               (j.op == azr::sandbox::protocol::Op::RunProgram && has_input(j, "'Goodbye'"));
      }});
  const StepResult r = run(1);
  ASSERT_EQ(r.proposer.size(), 6u);
  ASSERT_EQ(r.solver.size(), 6u);

  // The abduction proposal: out of the step, not invalid (-1), and not in the buffer.
  EXPECT_TRUE(r.proposer[2].skipped);
  EXPECT_FALSE(r.proposer[2].valid);
  EXPECT_EQ(r.proposer[2].reason, "internal_error");
  EXPECT_EQ(r.proposer_advantages[2], 0.0);
  EXPECT_EQ(r.inserted.inserted, 2);
  // The deduction task: rollouts 1 and 3 ("6") lost, 0 and 2 right: a = 2/2 = 1 -> -0.5, where
  // counting the lost ones as unsolved gave 0.5. The buffer records 2 attempts, 2 solved.
  EXPECT_FALSE(r.proposer[0].skipped);
  EXPECT_EQ(r.proposer[0].learn_n, 2);
  EXPECT_EQ(r.proposer[0].learn_k, 2);
  EXPECT_EQ(r.proposer[0].learn_lost, 2);
  EXPECT_DOUBLE_EQ(r.proposer[0].reward, -0.5);
  const auto added = buffer_->get(r.inserted.ids[0]);
  ASSERT_TRUE(added && added->learnability);
  EXPECT_DOUBLE_EQ(*added->learnability, 1.0);
  // The solver's two abduction answers: masked, where they were wrong (-0.5).
  for (size_t i : {2u, 3u}) {
    EXPECT_TRUE(r.solver[i].skipped) << i;
    EXPECT_EQ(r.solver[i].reason, "internal_error") << i;
    EXPECT_EQ(r.solver_advantages[i], 0.0) << i;
  }
  EXPECT_DOUBLE_EQ(r.solver[0].reward, 1.0);  // the rest as before

  // The update trains on every response but the three masked ones.
  int64_t total = 0;
  for (size_t i = 0; i < 6; i++) {
    if (i != 2) total += r.proposer[i].response_tokens;
    if (i != 2 && i != 3) total += r.solver[i].response_tokens;
  }
  EXPECT_DOUBLE_EQ(r.update.tokens, double(total));
  // One proposal, two learnability rollouts and two solver answers lost, of 11 results asked: the
  // 3 proposals that parse validated, the deduction task's 4 rollouts graded (the abduction task,
  // lost, has none), the 4 solver answers with an <answer> graded.
  double lost = -1, asked = -1;
  std::map<std::string, double> times;
  for (const auto& [name, value] : step_metrics(r, cfg_, 1e-3)) {
    if (name == "sandbox/internal_errors") lost = value;
    if (name == "sandbox/results") asked = value;
    if (name.rfind("time/", 0) == 0) times[name] = value;
  }
  EXPECT_EQ(lost, 5.0);
  EXPECT_EQ(asked, 11.0);
  // The step's phases and the rest of it add up to the step (time/other_s took the untimed part).
  ASSERT_EQ(times.size(), 6u);
  EXPECT_GE(times["time/other_s"], 0.0);
  EXPECT_NEAR(times["time/plan_s"] + times["time/generate_s"] + times["time/sandbox_s"] + times["time/update_s"] +
                  times["time/other_s"],
              times["time/step_s"], 1e-9);
  // The masked answers were not served: the first test's run serves the abduction seed twice.
  std::optional<Task> seed = buffer_->get(r.solver[2].task_id);
  ASSERT_TRUE(seed);
  EXPECT_EQ(seed->times_served, 0);
  EXPECT_EQ(seed->attempts, 0);
}

// Every learnability grade of the new deduction task lost: its proposal is masked (no rollout
// left to estimate a from), the valid task still goes into the buffer, with no learnability.
TEST_F(StepTest, ATaskWhoseLearnabilityWasAllLostIsKeptUnrewarded) {
  pool_ = std::make_unique<azr::sandbox::Pool>(azr::sandbox::PoolOptions{
      .workers = 2, .inject_fault = [](const azr::sandbox::Job& j) {
        if (j.op != azr::sandbox::protocol::Op::ParseLiterals) return false;
        for (const std::string& i : j.inputs)
          if (i == "5" || i == "6") return true;
        return false;
      }});
  const StepResult r = run(1);
  ASSERT_EQ(r.proposer.size(), 6u);
  EXPECT_TRUE(r.proposer[0].valid);
  EXPECT_TRUE(r.proposer[0].skipped);
  EXPECT_EQ(r.proposer[0].reason, "internal_error");
  EXPECT_EQ(r.proposer[0].learn_n, 0);
  EXPECT_EQ(r.proposer[0].learn_lost, 4);
  EXPECT_EQ(r.proposer_advantages[0], 0.0);
  EXPECT_DOUBLE_EQ(r.proposer[1].reward, -1);  // the other deduction proposal, alone in its group
  EXPECT_EQ(r.proposer_advantages[1], 0.0);
  EXPECT_EQ(r.inserted.inserted, 3);
  const auto added = buffer_->get(r.inserted.ids[0]);
  ASSERT_TRUE(added);
  EXPECT_EQ(added->program, "def f(x):\n    return x + 1");
  EXPECT_FALSE(added->learnability);
  EXPECT_EQ(added->attempts, 0);
  EXPECT_DOUBLE_EQ(r.proposer[2].reward, -0.5);  // the rest as in the first test
}

// A sandbox that loses everything (no worker can start): every result of the step is lost, 7
// asked (the 3 proposals that parse, none valid, so no learnability rollouts; the 4 solver answers
// with an <answer>). Three such steps in a row stop the run (trainer.cpp); one that gets any
// result back starts the count again.
TEST_F(StepTest, ASandboxThatLosesEverythingStopsTheRunAfterThreeSteps) {
  pool_ = std::make_unique<azr::sandbox::Pool>(
      azr::sandbox::PoolOptions{.workers = 2, .inject_fault = [](const azr::sandbox::Job&) { return true; }});
  LostStepWatch watch;
  for (int64_t step = 1; step <= 3; step++) {
    const StepResult r = run(step);
    const SandboxLosses l = sandbox_losses(r);
    EXPECT_EQ(l.proposer.asked, 3) << step;
    EXPECT_EQ(l.proposer.lost, 3) << step;
    EXPECT_EQ(l.solver.asked, 4) << step;
    EXPECT_EQ(l.solver.lost, 4) << step;
    EXPECT_EQ(watch.must_stop(l), step == 3) << step;
  }
  const LostOfAsked all{7, 7}, some{7, 6}, none{};
  LostStepWatch again;
  EXPECT_FALSE(again.must_stop({all, all}));
  EXPECT_FALSE(again.must_stop({all, all}));
  EXPECT_FALSE(again.must_stop({none, none}));  // nothing asked: no evidence either way
  EXPECT_FALSE(again.must_stop({some, some}));  // results came back
  EXPECT_EQ(again.in_a_row(), 0);
  EXPECT_FALSE(again.must_stop({all, all}));
  EXPECT_FALSE(again.must_stop({all, all}));
  EXPECT_TRUE(again.must_stop({all, all}));
  // Every validation lost (the alternate workers down) while the solver's grades come back.
  LostStepWatch validations;
  EXPECT_FALSE(validations.must_stop({all, some}));
  EXPECT_FALSE(validations.must_stop({all, some}));
  EXPECT_TRUE(validations.must_stop({all, some}));
  // A resumed run's counts (trainer_state.json), each role's its own: two of the proposer's in a
  // row stop at the next; the solver's counts go on from theirs.
  LostStepWatch resumed(2, 1);
  EXPECT_EQ(resumed.proposer_in_a_row(), 2);
  EXPECT_EQ(resumed.solver_in_a_row(), 1);
  EXPECT_TRUE(LostStepWatch(2, 0).must_stop({all, some}));
  EXPECT_FALSE(LostStepWatch(0, 2).must_stop({all, some}));
  LostStepWatch solver_side(0, 1);
  EXPECT_FALSE(solver_side.must_stop({some, all}));
  EXPECT_TRUE(solver_side.must_stop({some, all}));
}

}  // namespace
