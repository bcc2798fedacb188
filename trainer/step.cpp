#include "trainer/step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "buffer/seeded_random.h"
#include "buffer/task_jsonl.h"
#include "model/generate.h"
#include "proposer/parse.h"
#include "proposer/prompts.h"
#include "proposer/r1_answer.h"
#include "proposer/seeding.h"
#include "proposer/validate.h"
#include "rewards/rewards.h"
#include "solver/extract.h"
#include "solver/grade.h"
#include "solver/prompts.h"
#include "trainer/eval_setup.h"
#include "trainer/model_setup.h"
#include "trainer/seeds.h"

namespace azr::trainer {

using buffer::Task;
using buffer::TaskType;
using nlohmann::json;

namespace {

constexpr TaskType kTypes[3] = {TaskType::Deduction, TaskType::Abduction, TaskType::Induction};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- what crosses ranks: JSON (small records; tokens never leave their rank) ----------------

json task_wire(const Task& t) {
  json j = buffer::task_to_json(t, /*core_only=*/false);
  return j;
}

Task task_unwire(const json& j) {
  Task t = buffer::task_from_json(j);
  t.id = j.value("id", int64_t(0));
  if (auto o = buffer::parse_origin(j.value("origin", std::string("proposed")))) t.origin = *o;
  return t;
}

// Rank 0's plan of a step: per proposer item its references (induction: the one program's
// task), and the solver's tasks when they are drawn before the proposals ("lagged").
struct ProposerItem {
  TaskType type = TaskType::Deduction;
  std::vector<Task> refs;
};

json plan_wire(const std::vector<ProposerItem>& items, const std::vector<Task>& solver) {
  json j = json::object();
  json& p = j["proposer"] = json::array();
  for (const ProposerItem& it : items) {
    json refs = json::array();
    for (const Task& t : it.refs) refs.push_back(task_wire(t));
    p.push_back({{"type", int(it.type)}, {"refs", std::move(refs)}});
  }
  json& s = j["solver"] = json::array();
  for (const Task& t : solver) s.push_back(task_wire(t));
  return j;
}

void plan_unwire(const json& j, std::vector<ProposerItem>& items, std::vector<Task>& solver) {
  items.clear();
  solver.clear();
  for (const json& p : j.at("proposer")) {
    ProposerItem it;
    it.type = TaskType(p.at("type").get<int>());
    for (const json& r : p.at("refs")) it.refs.push_back(task_unwire(r));
    items.push_back(std::move(it));
  }
  for (const json& t : j.at("solver")) solver.push_back(task_unwire(t));
}

json outcome_wire(const ProposerOutcome& o) {
  json j = {{"i", o.index},         {"type", int(o.type)},         {"skipped", o.skipped},
            {"valid", o.valid},     {"reason", o.reason},          {"n", o.learn_n},
            {"k", o.learn_k},       {"a", o.solve_rate},           {"reward", o.reward},
            {"pt", o.prompt_tokens}, {"rt", o.response_tokens},     {"lt", o.learn_tokens},
            {"ll", o.learn_lost},    {"sa", o.sandbox_asked}, {"response", o.response}};
  if (o.valid) j["task"] = task_wire(o.task);
  return j;
}

ProposerOutcome proposer_unwire(const json& j) {
  ProposerOutcome o;
  o.index = j.at("i"), o.type = TaskType(j.at("type").get<int>()), o.skipped = j.at("skipped");
  o.valid = j.at("valid"), o.reason = j.at("reason"), o.learn_n = j.at("n"), o.learn_k = j.at("k");
  o.solve_rate = j.at("a"), o.reward = j.at("reward"), o.prompt_tokens = j.at("pt"), o.response_tokens = j.at("rt");
  o.learn_tokens = j.at("lt"), o.learn_lost = j.at("ll"), o.sandbox_asked = j.at("sa");
  o.response = j.at("response");
  if (o.valid) o.task = task_unwire(j.at("task"));
  return o;
}

json outcome_wire(const SolverOutcome& o) {
  return {{"i", o.index},           {"type", int(o.type)},   {"task", o.task_id}, {"skipped", o.skipped},
          {"format_ok", o.format_ok}, {"correct", o.correct}, {"reason", o.reason}, {"reward", o.reward},
          {"pt", o.prompt_tokens},   {"rt", o.response_tokens}, {"sa", o.sandbox_asked}, {"response", o.response}};
}

SolverOutcome solver_unwire(const json& j) {
  SolverOutcome o;
  o.index = j.at("i"), o.type = TaskType(j.at("type").get<int>()), o.task_id = j.at("task");
  o.skipped = j.at("skipped"), o.format_ok = j.at("format_ok"), o.correct = j.at("correct");
  o.reason = j.at("reason"), o.reward = j.at("reward"), o.prompt_tokens = j.at("pt");
  o.response_tokens = j.at("rt"), o.sandbox_asked = j.at("sa"), o.response = j.at("response");
  return o;
}

// Every rank's outcomes, on every rank, in global index order.
template <class Outcome, class Unwire>
std::vector<Outcome> gather(dist::Communicator& comm, const std::vector<Outcome>& mine, Unwire unwire) {
  json arr = json::array();
  for (const Outcome& o : mine) arr.push_back(outcome_wire(o));
  std::vector<Outcome> all;
  for (const std::string& part : comm.allgather(arr.dump()))
    for (const json& j : json::parse(part)) all.push_back(unwire(j));
  std::sort(all.begin(), all.end(), [](const Outcome& a, const Outcome& b) { return a.index < b.index; });
  return all;
}

// The solver's batch of one type: the newest tasks first, then uniform draws; when the buffer
// holds fewer than `batch` distinct tasks, topped up by uniform draws with repetition (as the
// reference's sampler does), so a group always has `batch` prompts.
std::vector<Task> solver_tasks(const buffer::TaskBuffer& b, TaskType type, int batch, int64_t newest_since,
                               std::mt19937_64& rng) {
  std::vector<Task> tasks = b.sample_solver_batch(type, batch, newest_since, rng);
  const size_t distinct = tasks.size();
  for (size_t i = 0; distinct > 0 && tasks.size() < size_t(batch); i++)
    tasks.push_back(tasks[buffer::uniform_below(rng, distinct)]);
  return tasks;
}

std::string proposer_prompt(const ProposerItem& it, const TrainConfig& cfg) {
  if (it.type == TaskType::Induction)
    return proposer::induction_proposer_prompt(it.refs.at(0).program, cfg.algorithm.induction_inputs, prompt_style(cfg));
  return proposer::code_proposer_prompt(it.type, it.refs, proposer::default_banned_words(), prompt_style(cfg),
                                        cfg.sandbox.cpu_seconds);
}

model::SamplingParams sampling_of(const StepContext& ctx) {
  model::SamplingParams p = model::sampling_defaults(ctx.policy.model(), ctx.policy.tokenizer(), true);
  p.temperature = float(ctx.config.algorithm.temperature);
  p.top_p = float(ctx.config.algorithm.top_p);
  p.top_k = ctx.config.algorithm.top_k;
  p.max_new_tokens = ctx.config.algorithm.max_response_tokens;
  return p;
}

std::vector<model::Completion> sample(const StepContext& ctx, const std::vector<std::vector<int32_t>>& prompts,
                                     const std::vector<uint64_t>& seeds, const model::SamplingParams& params,
                                     int batch) {
  if (ctx.sampler) return ctx.sampler(prompts, seeds, params);
  return ctx.policy.generate(prompts, seeds, params, batch);
}

bool mine(const StepContext& ctx, int64_t index) { return index % ctx.comm.size() == ctx.comm.rank(); }

rewards::RewardSettings reward_settings(const TrainConfig& cfg) {
  rewards::RewardSettings s;
  s.wrong_answer = cfg.algorithm.wrong_answer_reward;
  s.format_error = cfg.algorithm.format_error_reward;
  s.zero_learnability = cfg.algorithm.zero_learnability_reward;
  return s;
}

}  // namespace

// Built as the step builds its prompts (proposer_prompt, solver::solver_prompt), from a task with
// an empty program and no pairs, and no reference.
BarePrompt longest_bare_prompt(const model::Tokenizer& tok, const TrainConfig& cfg) {
  BarePrompt longest;
  for (TaskType type : kTypes) {
    Task empty;
    empty.type = type;
    ProposerItem it;
    it.type = type;
    if (type == TaskType::Induction) it.refs.push_back(empty);  // its prompt shows one program
    const std::pair<const char*, std::string> prompts[] = {
        {"proposer", proposer_prompt(it, cfg)}, {"solver", solver::solver_prompt(empty, prompt_style(cfg))}};
    for (const auto& [role, text] : prompts)
      if (const int64_t n = int64_t(tok.encode(text).size()); n > longest.tokens)
        longest = {std::string(buffer::type_name(type)) + " " + role, n};
  }
  return longest;
}

StepResult run_step(StepContext& ctx, int64_t step) {
  const TrainConfig& cfg = ctx.config;
  const AlgorithmSection& alg = cfg.algorithm;
  const bool root = ctx.comm.rank() == 0;
  const bool lagged = alg.solve_order == "lagged";
  const int B = alg.batch_size;
  auto phase = [&](const std::string& s) {
    if (ctx.phase) ctx.phase(s);
  };
  StepResult res;
  const double t_start = now_s();
  const uint64_t jobs_before = ctx.pool.stats().completed;
  const model::SamplingParams sampling = sampling_of(ctx);
  const model::PrefillStats prefill_before = ctx.policy.prefill_totals();
  const sandbox::Limits limits = sandbox_limits(cfg);
  const rewards::RewardSettings rs = reward_settings(cfg);

  // ---- plan (rank 0) ---------------------------------------------------------------------
  phase("planning");
  std::vector<ProposerItem> items;
  std::vector<Task> solver_batch;
  {
    std::string wire;
    if (root) {
      for (TaskType type : kTypes)
        for (int i = 0; i < B; i++) {
          ProposerItem it;
          it.type = type;
          if (type == TaskType::Induction) {
            it.refs.push_back(proposer::induction_source(*ctx.buffer, *ctx.data_rng));
          } else {
            it.refs = ctx.buffer->sample_references(type, alg.k_references, *ctx.data_rng);
            // Fewer references rather than a prompt the model cannot take.
            while (it.refs.size() > 1 &&
                   int64_t(ctx.policy.encode(proposer_prompt(it, cfg)).size()) > alg.max_prompt_tokens)
              it.refs.pop_back();
          }
          items.push_back(std::move(it));
        }
      if (lagged)
        for (TaskType type : kTypes)
          for (Task& t : solver_tasks(*ctx.buffer, type, B, step - 1, *ctx.data_rng)) solver_batch.push_back(std::move(t));
      wire = plan_wire(items, solver_batch).dump();
    }
    ctx.comm.broadcast(wire, 0);
    if (!root) plan_unwire(json::parse(wire), items, solver_batch);
  }
  res.times.plan = now_s() - t_start;

  // ---- propose (own share) ---------------------------------------------------------------
  phase("proposing");
  std::vector<ProposerOutcome> my_props;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<uint64_t> seeds;
  std::vector<size_t> gen_of;  // my_props index of each prompt
  for (size_t i = 0; i < items.size(); i++) {
    if (!mine(ctx, int64_t(i))) continue;
    ProposerOutcome o;
    o.index = int64_t(i);
    o.type = items[i].type;
    std::vector<int32_t> ids = ctx.policy.encode(proposer_prompt(items[i], cfg));
    o.prompt_tokens = int64_t(ids.size());
    if (o.prompt_tokens > alg.max_prompt_tokens) {
      o.skipped = true;
      o.reason = "prompt_too_long";
    } else {
      gen_of.push_back(my_props.size());
      prompts.push_back(std::move(ids));
      seeds.push_back(derive_seed(cfg.run.seed, {uint64_t(step), uint64_t(SeedPhase::Propose), uint64_t(i)}));
    }
    my_props.push_back(std::move(o));
  }
  double t0 = now_s();
  std::vector<model::Completion> gens = sample(ctx, prompts, seeds, sampling, alg.generation_batch_size);
  res.times.generate += now_s() - t0;
  // What each own proposal trains on.
  std::vector<TrainSequence> my_seqs_prop(my_props.size());
  const bool keep_text = cfg.buffer.rollout_retention_steps > 0;

  // ---- parse + validate ------------------------------------------------------------------
  phase("validating proposals");
  t0 = now_s();
  proposer::ParseOptions popts;
  popts.num_inputs = alg.induction_inputs;
  proposer::ValidateSettings vs;
  vs.limits = limits;
  vs.max_output_chars = size_t(cfg.sandbox.max_output_chars);
  vs.induction_inputs = size_t(alg.induction_inputs);
  std::vector<proposer::Proposal> parsed;
  std::vector<size_t> parsed_of;
  for (size_t g = 0; g < gens.size(); g++) {
    ProposerOutcome& o = my_props[gen_of[g]];
    const ProposerItem& it = items[size_t(o.index)];
    const model::Completion& c = gens[g];
    o.response_tokens = int64_t(c.tokens.size());
    if (keep_text) o.response = c.text;
    TrainSequence& seq = my_seqs_prop[gen_of[g]];
    seq.prompt = prompts[g];
    seq.response = c.tokens;
    seq.old_logp = c.logprobs;
    proposer::ParseResult pr = proposer::parse_proposal(it.type, c.text, it.refs.at(0).program, popts);
    o.reason = pr.check.reason;
    if (pr.check.ok) {
      parsed_of.push_back(gen_of[g]);
      parsed.push_back(std::move(pr.proposal));
    }
  }
  std::vector<proposer::ValidationResult> validated = proposer::validate(ctx.pool, parsed, vs);
  res.times.sandbox += now_s() - t0;
  for (size_t v = 0; v < validated.size(); v++) {
    ProposerOutcome& o = my_props[parsed_of[v]];
    o.reason = validated[v].check.reason;
    o.sandbox_asked++;
    // The sandbox failed, not the proposal: masked, as the reference drops such results, rather
    // than punished as invalid (a lost worker would teach the proposer to avoid good programs).
    if (o.reason == "internal_error") o.skipped = true;
    if (validated[v].check.ok) {
      o.valid = true;
      o.task = std::move(validated[v].task);
      o.task.step = step;
      o.task.origin = buffer::Origin::Proposed;
      o.task.proposer_sample = "step-" + std::to_string(step) + "/proposer-" + std::to_string(o.index);
    }
  }

  // ---- learnability: n solver rollouts per valid proposal (not trained on) ----------------
  phase("estimating learnability");
  {
    std::vector<std::vector<int32_t>> lp;
    std::vector<uint64_t> ls;
    std::vector<std::pair<size_t, int>> of;  // (my_props index, rollout)
    for (size_t k = 0; k < my_props.size(); k++) {
      ProposerOutcome& o = my_props[k];
      if (!o.valid) continue;
      std::vector<int32_t> ids = ctx.policy.encode(solver::solver_prompt(o.task, prompt_style(ctx.config)));
      if (int64_t(ids.size()) > alg.max_prompt_tokens) {  // the solver could never be shown it
        o.valid = false;
        o.reason = "prompt_too_long";
        continue;
      }
      for (int j = 0; j < alg.learnability_rollouts; j++) {
        lp.push_back(ids);
        ls.push_back(derive_seed(cfg.run.seed, {uint64_t(step), uint64_t(SeedPhase::Learnability), uint64_t(o.index),
                                                uint64_t(j)}));
        of.emplace_back(k, j);
      }
    }
    t0 = now_s();
    std::vector<model::Completion> lg = sample(ctx, lp, ls, sampling, alg.generation_batch_size);
    res.times.generate += now_s() - t0;
    t0 = now_s();
    std::vector<Task> tasks;
    std::vector<solver::Answer> answers;
    std::vector<size_t> answer_of;
    for (size_t r = 0; r < lg.size(); r++) {
      ProposerOutcome& o = my_props[of[r].first];
      o.learn_tokens += int64_t(lg[r].tokens.size());
      o.learn_n++;
      if (of[r].second == 0) tasks.push_back(o.task);
      // Graded whatever its <think> format, as the reference estimates a (the paper's r_solve is
      // 1[y = y*]): the format penalty is the trained solver's, and counting it here would rate a
      // task by how well the solver formats while it still learns to. No <answer>: unsolved.
      const solver::Extraction e = solver::extract_answer(o.task.type, lg[r].text);
      if (e.reason == "no_answer") continue;
      answers.push_back({tasks.size() - 1, e.answer});
      answer_of.push_back(of[r].first);
    }
    solver::GradeSettings gs;
    gs.limits = limits;
    const std::vector<solver::Grade> grades = solver::grade(ctx.pool, tasks, answers, gs);
    for (size_t a = 0; a < grades.size(); a++) {
      ProposerOutcome& o = my_props[answer_of[a]];
      o.sandbox_asked++;
      if (grades[a].correct) o.learn_k++;
      if (grades[a].reason == "internal_error") o.learn_n--, o.learn_lost++;  // out of the mean, as the reference
    }
    res.times.sandbox += now_s() - t0;
    for (ProposerOutcome& o : my_props) {
      if (o.valid) o.solve_rate = o.learn_n ? double(o.learn_k) / o.learn_n : 0;
      // No rollout left to estimate it from: the task is kept, its proposer is not rewarded.
      if (o.valid && o.learn_n == 0 && o.learn_lost > 0) o.skipped = true, o.reason = "internal_error";
      o.reward = o.skipped ? 0 : rewards::proposer_reward(o.valid, o.valid, o.solve_rate, rs);
    }
  }
  res.proposer = gather(ctx.comm, my_props, proposer_unwire);

  // ---- buffer (rank 0): the step's valid proposals, their solve statistics ----------------
  if (root) {
    std::vector<Task> valid;
    std::vector<const ProposerOutcome*> from;
    std::vector<int64_t> referenced;
    for (const ProposerOutcome& o : res.proposer) {
      for (const Task& r : items[size_t(o.index)].refs) referenced.push_back(r.id);
      if (!o.valid) continue;
      valid.push_back(o.task);
      from.push_back(&o);
    }
    res.inserted = ctx.buffer->insert(valid);
    for (size_t v = 0; v < valid.size(); v++)
      if (res.inserted.ids[v] != 0 && from[v]->learn_n > 0)
        ctx.buffer->record_attempts(res.inserted.ids[v], from[v]->learn_n, from[v]->learn_k, true);
    ctx.buffer->mark_referenced(referenced);
    if (!lagged) {
      std::string wire;
      for (TaskType type : kTypes)
        for (Task& t : solver_tasks(*ctx.buffer, type, B, step, *ctx.data_rng)) solver_batch.push_back(std::move(t));
      json arr = json::array();
      for (const Task& t : solver_batch) arr.push_back(task_wire(t));
      wire = arr.dump();
      ctx.comm.broadcast(wire, 0);
    }
  } else if (!lagged) {
    std::string wire;
    ctx.comm.broadcast(wire, 0);
    solver_batch.clear();
    for (const json& j : json::parse(wire)) solver_batch.push_back(task_unwire(j));
  }

  // ---- solve (own share) ------------------------------------------------------------------
  phase("solving");
  std::vector<SolverOutcome> my_solves;
  std::vector<TrainSequence> my_seqs_solve;
  {
    std::vector<std::vector<int32_t>> sp;
    std::vector<uint64_t> ss;
    std::vector<size_t> of;
    for (size_t i = 0; i < solver_batch.size(); i++) {
      if (!mine(ctx, int64_t(i))) continue;
      SolverOutcome o;
      o.index = int64_t(i);
      o.type = solver_batch[i].type;
      o.task_id = solver_batch[i].id;
      std::vector<int32_t> ids = ctx.policy.encode(solver::solver_prompt(solver_batch[i], prompt_style(ctx.config)));
      o.prompt_tokens = int64_t(ids.size());
      if (o.prompt_tokens > alg.max_prompt_tokens) {
        o.skipped = true;
        o.reason = "prompt_too_long";
      } else {
        of.push_back(my_solves.size());
        sp.push_back(std::move(ids));
        ss.push_back(derive_seed(cfg.run.seed, {uint64_t(step), uint64_t(SeedPhase::Solve), uint64_t(i)}));
      }
      my_solves.push_back(std::move(o));
    }
    t0 = now_s();
    std::vector<model::Completion> sg = sample(ctx, sp, ss, sampling, alg.generation_batch_size);
    res.times.generate += now_s() - t0;
    t0 = now_s();
    my_seqs_solve.resize(my_solves.size());
    std::vector<Task> tasks;
    std::vector<solver::Answer> answers;
    std::vector<size_t> answer_of;
    for (size_t g = 0; g < sg.size(); g++) {
      SolverOutcome& o = my_solves[of[g]];
      const Task& task = solver_batch[size_t(o.index)];
      o.response_tokens = int64_t(sg[g].tokens.size());
      if (keep_text) o.response = sg[g].text;
      TrainSequence& seq = my_seqs_solve[of[g]];
      seq.prompt = sp[g];
      seq.response = sg[g].tokens;
      seq.old_logp = sg[g].logprobs;
      const solver::Extraction e = solver::extract_answer(task.type, sg[g].text);
      o.format_ok = e.format_ok;
      o.reason = e.reason;
      if (!e.format_ok) continue;
      tasks.push_back(task);
      answers.push_back({tasks.size() - 1, e.answer});
      answer_of.push_back(of[g]);
    }
    solver::GradeSettings gs;
    gs.limits = limits;
    const std::vector<solver::Grade> grades = solver::grade(ctx.pool, tasks, answers, gs);
    for (size_t a = 0; a < grades.size(); a++) {
      SolverOutcome& o = my_solves[answer_of[a]];
      o.sandbox_asked = true;
      o.correct = grades[a].correct;
      o.reason = grades[a].reason;
      if (o.reason == "internal_error") o.skipped = true;  // masked: not the answer's fault
    }
    for (SolverOutcome& o : my_solves)
      if (!o.skipped) o.reward = rewards::solver_reward(o.format_ok, o.correct ? 1.0 : 0.0, rs);
    res.times.sandbox += now_s() - t0;
  }
  res.solver = gather(ctx.comm, my_solves, solver_unwire);

  if (root) {
    std::vector<int64_t> served;
    for (const SolverOutcome& o : res.solver) {
      if (o.skipped) continue;
      served.push_back(o.task_id);
      if (o.task_id > 0) ctx.buffer->record_attempts(o.task_id, 1, o.correct ? 1 : 0, false);
    }
    ctx.buffer->mark_served(served);
    if (keep_text) {
      std::vector<buffer::Rollout> rolls;
      for (const ProposerOutcome& o : res.proposer)
        if (!o.skipped)
          // The R1 structure itself: the parse stops at its first failure (no_answer,
          // no_code_block, ...) before the format check, so its reason does not say.
          rolls.push_back({step, "proposer", o.type, std::nullopt, o.response, o.reward, o.valid,
                           proposer::r1_format_ok(proposer::judged_text(o.response))});
      for (const SolverOutcome& o : res.solver)
        if (!o.skipped)
          rolls.push_back({step, "solver", o.type, o.task_id > 0 ? std::optional<int64_t>(o.task_id) : std::nullopt,
                           o.response, o.reward, o.correct, o.format_ok});
      ctx.buffer->add_rollouts(rolls);
    }
  }

  // ---- rewards -> TRR++ (global groups, identical on every rank) --------------------------
  std::vector<rewards::Sequence> seqs;
  for (const ProposerOutcome& o : res.proposer)
    if (!o.skipped) seqs.push_back({rewards::group_of(int(o.type), false), o.reward, o.response_tokens});
  for (const SolverOutcome& o : res.solver)
    if (!o.skipped) seqs.push_back({rewards::group_of(int(o.type), true), o.reward, o.response_tokens});
  const std::vector<double> adv = rewards::trr_plus_plus(seqs, alg.advantage_eps);
  res.proposer_advantages.assign(res.proposer.size(), 0.0);
  res.solver_advantages.assign(res.solver.size(), 0.0);
  {
    size_t a = 0;
    for (size_t i = 0; i < res.proposer.size(); i++)
      if (!res.proposer[i].skipped) res.proposer_advantages[i] = adv[a++];
    for (size_t i = 0; i < res.solver.size(); i++)
      if (!res.solver[i].skipped) res.solver_advantages[i] = adv[a++];
  }
  double global_tokens = 0;
  for (const rewards::Sequence& s : seqs) global_tokens += double(s.tokens);
  for (const ProposerOutcome& o : res.proposer) res.generated_tokens += o.response_tokens + o.learn_tokens;
  for (const SolverOutcome& o : res.solver) res.generated_tokens += o.response_tokens;
  {
    const model::PrefillStats& now = ctx.policy.prefill_totals();
    double t[2] = {double(now.tokens - prefill_before.tokens), double(now.computed_tokens - prefill_before.computed_tokens)};
    ctx.comm.allreduce_sum(std::span<double>(t));
    res.prompt_tokens = int64_t(t[0]), res.prefilled_tokens = int64_t(t[1]);
  }

  // ---- the update on the own share -------------------------------------------------------
  phase("updating the policy");
  std::vector<TrainSequence> train;
  for (size_t k = 0; k < my_props.size(); k++) {
    if (my_props[k].skipped) continue;
    my_seqs_prop[k].advantage = float(res.proposer_advantages[size_t(my_props[k].index)]);
    train.push_back(std::move(my_seqs_prop[k]));
  }
  for (size_t k = 0; k < my_solves.size(); k++) {
    if (my_solves[k].skipped) continue;
    my_seqs_solve[k].advantage = float(res.solver_advantages[size_t(my_solves[k].index)]);
    train.push_back(std::move(my_seqs_solve[k]));
  }
  UpdateSettings us;
  us.ppo.clip_eps = alg.clip_eps;
  us.ppo.entropy_coeff = alg.entropy_coeff;
  us.temperature = float(alg.temperature);
  us.micro_batch_size = alg.micro_batch_size;
  us.grad_clip = alg.grad_clip;
  us.old_logp_from_learner = sampling.top_p < 1.f || sampling.top_k > 0;  // policy.h: truncated log-probs
  if (ctx.before_update) ctx.before_update(train);
  t0 = now_s();
  res.update = ctx.policy.update(train, global_tokens, ctx.comm, us);
  res.times.update = now_s() - t0;

  // ---- the buffer's size, as rank 0 sees it --------------------------------------------
  std::vector<double> sizes(3, 0.0);
  if (root) {
    const buffer::Counts c = ctx.buffer->counts();
    for (int t = 0; t < 3; t++) sizes[size_t(t)] = double(c.by_type[t]);
  }
  ctx.comm.allreduce_sum(std::span<double>(sizes));
  for (int t = 0; t < 3; t++) res.buffer_tasks[t] = int64_t(sizes[size_t(t)]);
  res.sandbox_jobs = ctx.pool.stats().completed - jobs_before;
  res.times.total = now_s() - t_start;
  return res;
}

// ---- metrics -----------------------------------------------------------------------------

namespace {

struct Moments {
  double n = 0, sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
  void add(double x) {
    n++, sum += x, sq += x * x;
    lo = std::min(lo, x), hi = std::max(hi, x);
  }
  double mean() const { return n ? sum / n : 0; }
  double std() const { return n > 1 ? std::sqrt(std::max(0.0, (sq - sum * sum / n) / (n - 1))) : 0; }
};

}  // namespace

SandboxLosses sandbox_losses(const StepResult& r) {
  // Lost (internal_error), masked out of the update and the learnability means: a proposal's
  // validation, a solver's grade, a learnability rollout's grade.
  SandboxLosses l;
  for (const ProposerOutcome& o : r.proposer) {
    l.proposer.asked += o.sandbox_asked;
    l.proposer.lost += o.learn_lost + (o.skipped && !o.valid && o.reason == "internal_error");
  }
  for (const SolverOutcome& o : r.solver) {
    l.solver.asked += o.sandbox_asked;
    l.solver.lost += o.skipped && o.reason == "internal_error";
  }
  return l;
}

PromptsTooLong prompts_too_long(const StepResult& r) {
  PromptsTooLong n;
  for (const ProposerOutcome& o : r.proposer) n.proposer += o.skipped && o.reason == "prompt_too_long";
  for (const SolverOutcome& o : r.solver) n.solver += o.skipped && o.reason == "prompt_too_long";
  return n;
}

Scalars step_metrics(const StepResult& r, const TrainConfig& cfg, double lr) {
  Scalars m;
  auto add = [&](const std::string& k, double v) { m.emplace_back(k, v); };
  Moments prop_valid_all, solve_all;
  std::map<std::string, int64_t> rejected;
  int64_t hist[6] = {0, 0, 0, 0, 0, 0};  // a = 0, (0,.25], (.25,.5], (.5,.75], (.75,1), 1
  for (TaskType type : kTypes) {
    const std::string tn = buffer::type_name(type);
    Moments pr, pa, pl, valid, learn, sr, sa, sl, acc, fmt;
    for (size_t i = 0; i < r.proposer.size(); i++) {
      const ProposerOutcome& o = r.proposer[i];
      if (o.type != type || o.skipped) continue;
      pr.add(o.reward), pa.add(r.proposer_advantages[i]), pl.add(double(o.response_tokens));
      valid.add(o.valid ? 1 : 0), prop_valid_all.add(o.valid ? 1 : 0);
      if (o.valid) {
        learn.add(o.solve_rate);
        const double a = o.solve_rate;
        hist[a <= 0 ? 0 : a >= 1 ? 5 : a <= .25 ? 1 : a <= .5 ? 2 : a <= .75 ? 3 : 4]++;
      } else {
        rejected[o.reason]++;
      }
    }
    for (size_t i = 0; i < r.solver.size(); i++) {
      const SolverOutcome& o = r.solver[i];
      if (o.type != type || o.skipped) continue;
      sr.add(o.reward), sa.add(r.solver_advantages[i]), sl.add(double(o.response_tokens));
      acc.add(o.correct ? 1 : 0), fmt.add(o.format_ok ? 1 : 0), solve_all.add(o.correct ? 1 : 0);
    }
    add("proposer/valid_rate/" + tn, valid.mean());
    add("proposer/learnability/" + tn, learn.mean());
    add("solver/accuracy/" + tn, acc.mean());
    add("solver/format_ok/" + tn, fmt.mean());
    for (auto [role, rew, advm, len] : {std::tuple{"proposer", &pr, &pa, &pl}, std::tuple{"solver", &sr, &sa, &sl}}) {
      const std::string g = tn + "/" + role;
      add("reward/" + g + "/mean", rew->mean());
      add("reward/" + g + "/std", rew->std());
      add("advantage/" + g + "/mean", advm->mean());
      add("advantage/" + g + "/std", advm->std());
      add("advantage/" + g + "/min", advm->n ? advm->lo : 0);
      add("advantage/" + g + "/max", advm->n ? advm->hi : 0);
      add("length/" + g + "/mean", len->mean());
      add("length/" + g + "/max", len->n ? len->hi : 0);
      add("count/" + g, rew->n);
    }
    add("buffer/size/" + tn, double(r.buffer_tasks[int(type)]));
  }
  add("proposer/valid_rate", prop_valid_all.mean());
  add("solver/accuracy", solve_all.mean());
  add("proposer/inserted", double(r.inserted.inserted));
  add("proposer/duplicates", double(r.inserted.duplicates));
  static const char* kHist[6] = {"0", "0-0.25", "0.25-0.5", "0.5-0.75", "0.75-1", "1"};
  for (int h = 0; h < 6; h++) add(std::string("learnability/hist/") + kHist[h], double(hist[h]));
  for (const auto& [reason, n] : rejected) add("proposer/rejected/" + reason, double(n));
  const SandboxLosses losses = sandbox_losses(r);
  add("sandbox/internal_errors", double(losses.lost()));
  const PromptsTooLong too_long = prompts_too_long(r);
  add("skipped/prompt_too_long/proposer", double(too_long.proposer));
  add("skipped/prompt_too_long/solver", double(too_long.solver));
  add("sandbox/results", double(losses.asked()));
  add("loss/total", r.update.loss);
  add("loss/pg", r.update.pg_loss);
  add("loss/entropy", r.update.entropy);
  add("loss/clip_fraction", r.update.clip_fraction);
  add("loss/approx_kl", r.update.approx_kl);
  add("optim/grad_norm", r.update.grad_norm);
  add("optim/skipped_not_finite", r.update.skipped_not_finite ? 1.0 : 0.0);
  add("optim/lr", lr);
  add("tokens/trained", r.update.tokens);
  add("tokens/generated", double(r.generated_tokens));
  // How a batch falls into generate() calls and ranks decides which copies meet, so this one is
  // under perf/, beside the other figures that may differ between layouts of the same run.
  if (r.prompt_tokens > 0) {
    add("tokens/prompt", double(r.prompt_tokens));
    add("perf/prefilled_fraction", double(r.prefilled_tokens) / double(r.prompt_tokens));
  }
  add("time/plan_s", r.times.plan);
  add("time/generate_s", r.times.generate);
  add("time/sandbox_s", r.times.sandbox);
  add("time/update_s", r.times.update);
  add("time/other_s", r.times.other());
  add("time/step_s", r.times.total);
  add("perf/generate_tokens_per_s", r.times.generate > 0 ? double(r.generated_tokens) / r.times.generate : 0);
  add("perf/train_tokens_per_s", r.times.update > 0 ? r.update.processed_tokens / r.times.update : 0);
  add("perf/sandbox_jobs_per_s", r.times.sandbox > 0 ? double(r.sandbox_jobs) / r.times.sandbox : 0);
  (void)cfg;
  return m;
}

}  // namespace azr::trainer
