// azr task: the task engine as training uses it, one piece at a time: validate proposer
// responses, grade solver responses, print the prompts.
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "buffer/seeded_random.h"
#include "buffer/task_buffer.h"
#include "buffer/task_jsonl.h"
#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/input.h"
#include "model/chat_format.h"
#include "model/json_text.h"
#include "proposer/parse.h"
#include "proposer/prompts.h"
#include "proposer/seed.h"
#include "proposer/validate.h"
#include "rewards/rewards.h"
#include "sandbox/pool.h"
#include "solver/extract.h"
#include "solver/grade.h"
#include "solver/prompts.h"

namespace azr::cli {
namespace {

using nlohmann::json;
using buffer::TaskType;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

TaskType task_type(const std::string& s) {
  auto t = buffer::parse_type(s);
  if (!t) throw UsageError("task: --type must be deduction, abduction or induction (got '" + s + "')");
  return *t;
}

sandbox::Limits limits_of(const TaskOptions& o) {
  sandbox::Limits l;
  l.cpu_seconds = o.timeout;
  l.memory_bytes = static_cast<uint64_t>(o.memory_mib * 1024 * 1024);
  return l;
}

// One non-blank JSONL line, parsed, with its location for messages.
struct Line {
  json j;
  std::string where;  // "FILE:LINE"
};

// Reads every line first; a bad line is reported as FILE:LINE and nothing runs.
template <class Check>
std::vector<Line> read_lines(const std::string& path, Check check) {
  InputFile input(path);
  std::vector<Line> lines;
  JsonLines input_lines(input.stream(), input.name());
  for (json j; input_lines.next(j);) {
    const std::string at = input_lines.where();
    const std::string where = at.substr(0, at.size() - 2);  // "FILE:LINE", as check() adds its own ": "
    if (!j.is_object()) throw UsageError(where + ": expected a JSON object");
    check(j, where);
    lines.push_back({std::move(j), where});
  }
  return lines;
}

void require_string(const json& j, const std::string& where, const std::string& field) {
  if (!j.contains(field)) throw UsageError(where + ": field '" + field + "' is missing");
  if (!j[field].is_string()) throw UsageError(where + ": field '" + field + "' must be a string");
}

sandbox::Pool make_pool(const TaskOptions& o) {
  sandbox::PoolOptions popts;
  popts.workers = o.workers;
  popts.alternate_workers = -1;  // validation checks determinism on a second hash seed
  return sandbox::Pool(popts);
}

int run_validate(const TaskOptions& o) {
  const TaskType type = task_type(o.type);
  auto lines = read_lines(o.jsonl, [&](const json& j, const std::string& where) {
    require_string(j, where, "response");
    if (type == TaskType::Induction) require_string(j, where, "program");
  });

  // Parse everything; only proposals whose parse check is ok go to the sandbox.
  std::vector<proposer::Check> parsed(lines.size());
  std::vector<proposer::Proposal> proposals;
  std::vector<size_t> proposal_of(lines.size(), SIZE_MAX);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string response = lines[i].j["response"].get<std::string>();
    proposer::ParseResult r = type == TaskType::Induction
                                  ? proposer::parse_induction_proposal(response, lines[i].j["program"].get<std::string>())
                                  : proposer::parse_code_proposal(type, response);
    parsed[i] = r.check;
    if (r.check.ok) {
      proposal_of[i] = proposals.size();
      proposals.push_back(std::move(r.proposal));
    }
  }
  std::vector<proposer::ValidationResult> results;
  if (!proposals.empty()) {
    sandbox::Pool pool(make_pool(o));
    proposer::ValidateSettings settings;
    settings.limits = limits_of(o);
    results = proposer::validate(pool, proposals, settings);
  }
  bool all_ran = true;
  for (size_t i = 0; i < lines.size(); ++i) {
    json out;
    if (lines[i].j.contains("id")) out["id"] = lines[i].j["id"];
    proposer::Check c = parsed[i];
    const proposer::ValidationResult* v = nullptr;
    if (proposal_of[i] != SIZE_MAX) {
      v = &results.at(proposal_of[i]);
      c = v->check;
    }
    out["valid"] = c.ok;
    out["reason"] = c.reason;
    out["detail"] = c.detail;
    if (c.ok && v) out["task"] = buffer::task_to_json(v->task, true);
    if (c.reason == "internal_error") all_ran = false;
    std::cout << dump(out) << '\n';
  }
  std::cout.flush();
  return all_ran ? 0 : 1;
}

int run_grade(const TaskOptions& o) {
  const TaskType type = task_type(o.type);
  std::vector<buffer::Task> tasks;
  auto lines = read_lines(o.jsonl, [&](const json& j, const std::string& where) {
    if (!j.contains("task")) throw UsageError(where + ": field 'task' is missing");
    if (!j["task"].is_object()) throw UsageError(where + ": field 'task' must be an object (a task in the buffer's import format)");
    require_string(j, where, "response");
    buffer::Task t;
    try {
      t = buffer::task_from_json(j["task"]);
    } catch (const std::exception& e) {
      throw UsageError(where + ": invalid task: " + e.what());
    }
    if (t.type != type)
      throw UsageError(where + ": the task is of type " + buffer::type_name(t.type) + ", not " + o.type + " (--type)");
    tasks.push_back(std::move(t));
  });

  std::vector<solver::Extraction> ex(lines.size());
  std::vector<solver::Answer> answers;
  std::vector<size_t> answer_of(lines.size(), SIZE_MAX);
  for (size_t i = 0; i < lines.size(); ++i) {
    ex[i] = solver::extract_answer(type, lines[i].j["response"].get<std::string>());
    if (ex[i].format_ok) {
      answer_of[i] = answers.size();
      answers.push_back({i, ex[i].answer});
    }
  }
  std::vector<solver::Grade> grades;
  if (!answers.empty()) {
    sandbox::PoolOptions popts;
    popts.workers = o.workers;
    popts.alternate_workers = 0;  // grading needs no determinism runs
    sandbox::Pool pool(popts);
    solver::GradeSettings settings;
    settings.limits = limits_of(o);
    grades = solver::grade(pool, tasks, answers, settings);
  }
  bool all_ran = true;
  for (size_t i = 0; i < lines.size(); ++i) {
    json out;
    if (lines[i].j.contains("id")) out["id"] = lines[i].j["id"];
    if (answer_of[i] == SIZE_MAX) {
      out["correct"] = false;
      out["reward"] = rewards::solver_reward(false, 0);
      out["reason"] = ex[i].reason;
    } else {
      const solver::Grade& g = grades.at(answer_of[i]);
      out["correct"] = g.correct;
      // Binary, as training rewards it; a grade the sandbox lost has none: training masks it.
      out["reward"] =
          g.reason == "internal_error" ? json(nullptr) : json(rewards::solver_reward(true, g.correct ? 1.0 : 0.0));
      out["reason"] = g.reason;
      if (!g.detail.empty()) out["detail"] = g.detail;
      if (g.reason == "internal_error") all_ran = false;
    }
    std::cout << dump(out) << '\n';
  }
  std::cout.flush();
  return all_ran ? 0 : 1;
}

int run_prompt(const TaskOptions& o) {
  const TaskType type = task_type(o.type);
  // --role and --k are checked by the parser (add_prompt below).
  if (o.task_id != 0 && o.role != "solver") throw UsageError("task prompt: --task-id goes with --role solver");
  if (o.task_id != 0 && o.db.empty()) throw UsageError("task prompt: --task-id needs --db");
  // It was ignored without a word: a solver's prompt holds its one task, an induction proposer's one program.
  if (o.k_given && (o.role != "proposer" || o.type == "induction"))
    throw UsageError("task prompt: --k (references) goes with --role proposer and --type deduction or abduction; "
                     "an induction proposer's prompt holds one program, a solver's its one task");
  std::optional<buffer::TaskBuffer> db;
  if (!o.db.empty()) {
    try {
      buffer::Options opts;
      opts.quick_check = true;  // a corrupt file is refused, not sampled from where it still reads
      db.emplace(buffer::TaskBuffer::open(o.db, buffer::TaskBuffer::Mode::ReadOnly, opts));
    } catch (const buffer::BufferError& e) {
      throw UsageError(e.what());
    }
  }
  std::mt19937_64 rng(o.seed ? *o.seed : std::random_device{}());
  const model::PromptStyle style = model::parse_prompt_style(o.prompt_style);  // CLI checked the name
  std::vector<int64_t> ids;
  std::string prompt;
  if (o.role == "proposer") {
    if (type == TaskType::Induction) {
      // One program from deduction ∪ abduction, uniformly over the union.
      buffer::Task ref = proposer::identity_seed(TaskType::Deduction);
      if (db) {
        buffer::Counts c = db->counts();
        int64_t nd = c.by_type[0], na = c.by_type[1];
        if (nd + na > 0) {
          auto pick = static_cast<int64_t>(buffer::uniform_below(rng, uint64_t(nd + na)));
          auto v = db->sample_references(pick < nd ? TaskType::Deduction : TaskType::Abduction, 1, rng);
          if (!v.empty()) ref = v[0];
        }
      }
      if (ref.id) ids.push_back(ref.id);
      prompt = proposer::induction_proposer_prompt(ref.program, 10, style);
    } else {
      std::vector<buffer::Task> refs;
      if (db) refs = db->sample_references(type, o.k, rng);
      if (refs.empty()) refs.push_back(proposer::identity_seed(type));
      for (const auto& t : refs)
        if (t.id) ids.push_back(t.id);
      prompt = proposer::code_proposer_prompt(type, refs, proposer::default_banned_words(), style);
    }
  } else {
    buffer::Task t = proposer::identity_seed(type);
    if (o.task_id != 0) {
      auto got = db->get(o.task_id);
      if (!got) throw UsageError("task prompt: no task " + std::to_string(o.task_id) + " in " + o.db);
      if (got->type != type)
        throw UsageError("task prompt: task " + std::to_string(o.task_id) + " is " + buffer::type_name(got->type) +
                         ", not " + o.type);
      t = *got;
    } else if (db) {
      auto v = db->sample_references(type, 1, rng);
      if (!v.empty()) t = v[0];
    }
    if (t.id) ids.push_back(t.id);
    prompt = solver::solver_prompt(t, style);
  }
  if (o.json) {
    std::cout << dump(json{{"prompt", prompt}, {"task_ids", ids}}) << '\n';
  } else {
    std::cout << prompt << '\n';
  }
  return 0;
}

void add_sandbox_flags(CLI::App* c, TaskOptions& o) {
  c->add_option("--timeout", o.timeout, "CPU seconds per sandbox job")->capture_default_str()
      ->check(between(sandbox::kMinCpuSeconds, sandbox::kMaxCpuSeconds));
  c->add_option("--memory", o.memory_mib, "address-space limit per job, MiB")->capture_default_str()
      ->check(between(sandbox::kMinMemoryMib, sandbox::kMaxMemoryMib));
  c->add_option("--workers", o.workers, "sandbox workers (default: one per CPU)")->check(between(0, 1024));
}

}  // namespace

CLI::App* add_task_command(CLI::App& app, TaskOptions& o) {
  CLI::App* c = app.add_subcommand("task", "Validate proposer responses, grade solver responses, print prompts");
  c->require_subcommand(1);
  c->footer("Exit status: 0 when everything ran; 1 if the sandbox failed; 2 on bad input (FILE:LINE: ...).");
  const auto types = CLI::IsMember({"deduction", "abduction", "induction"});

  CLI::App* v = c->add_subcommand("validate", "Parse and validate proposer responses as training does");
  v->footer("Input lines: {\"response\": RAW} (deduction/abduction), plus \"program\" (induction); RAW is the "
            "generation after the prompt's <think>. Output lines: {\"valid\", \"reason\", \"detail\", \"task\" (when "
            "valid, in the buffer's import format)}; an input \"id\" is copied.");
  v->add_option("--type", o.type, "task type")->required()->check(types);
  v->add_option("--jsonl", o.jsonl, "JSONL file, or - for stdin")->check(non_empty_path())->required();
  add_sandbox_flags(v, o);
  v->callback([&] { o.action = "validate"; });

  CLI::App* g = c->add_subcommand("grade", "Extract and grade solver responses as training does");
  g->footer("Input lines: {\"task\": TASK (import format), \"response\": RAW}. Output lines: {\"correct\", \"reward\", "
            "\"reason\"[, \"detail\"]}; an input \"id\" is copied.");
  g->add_option("--type", o.type, "task type")->required()->check(types);
  g->add_option("--jsonl", o.jsonl, "JSONL file, or - for stdin")->check(non_empty_path())->required();
  add_sandbox_flags(g, o);
  g->callback([&] { o.action = "grade"; });

  CLI::App* p = c->add_subcommand("prompt", "Print a proposer or solver prompt (as the trainer shows it)");
  p->add_option("--role", o.role, "proposer or solver")->required()->check(CLI::IsMember({"proposer", "solver"}));
  p->add_option("--type", o.type, "task type")->required()->check(types);
  p->add_option("--db", o.db, "task buffer to sample from (default: the identity seed)")->check(non_empty_path());
  p->add_option("--k", o.k, "proposer references (deduction/abduction)")
      ->capture_default_str()
      ->check(between(1, 1000))
      ->each([&](const std::string&) { o.k_given = true; });
  p->add_option("--seed", o.seed, "sampling seed (default: random)")->check(seed());
  p->add_option("--prompt-style", o.prompt_style, "paper (R1-wrapped, the reference's) or compact (algorithm.prompt_style)")
      ->capture_default_str()->check(CLI::IsMember({"paper", "compact"}));
  p->add_option("--task-id", o.task_id, "solver: this task of --db instead of a sampled one")->check(positive());
  p->add_flag("--json", o.json, "print {\"prompt\", \"task_ids\"}");
  p->callback([&] { o.action = "prompt"; });
  return c;
}

int run_task(const TaskOptions& o) {
  if (o.action == "validate") return run_validate(o);
  if (o.action == "grade") return run_grade(o);
  if (o.action == "prompt") return run_prompt(o);
  throw UsageError("task: choose validate, grade or prompt");
}

}  // namespace azr::cli
