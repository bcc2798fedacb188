// azr exec: run programs through the sandbox exactly as training does, and print what
// training would record.
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/input.h"
#include "model/json_text.h"
#include "sandbox/checks.h"
#include "sandbox/pool.h"
#include "sandbox/protocol.h"

namespace azr::cli {
namespace {

using nlohmann::json;
using sandbox::CallResult;
using sandbox::Status;

struct Item {
  json id;  // passed through when the input line has one
  std::string program;
  std::string input;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot open file (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Reads and validates every line before anything runs: a bad line is reported with its line
// number and nothing is executed.
std::vector<Item> read_jsonl(const std::string& path) {
  InputFile input(path);
  std::vector<Item> items;
  JsonLines lines(input.stream(), input.name());
  for (json j; lines.next(j);) {
    auto where = [&](const std::string& field) { return lines.where() + "field '" + field + "'"; };
    if (!j.is_object()) throw UsageError(lines.where() + "expected a JSON object");
    if (!j.contains("program")) throw UsageError(where("program") + " is missing");
    if (!j["program"].is_string()) throw UsageError(where("program") + " must be a string");
    if (!j.contains("input")) throw UsageError(where("input") + " is missing (use \"\" for no arguments)");
    if (!j["input"].is_string()) throw UsageError(where("input") + " must be a string (the argument list as Python source)");
    Item it;
    if (j.contains("id")) it.id = j["id"];
    it.program = j["program"].get<std::string>();
    it.input = j["input"].get<std::string>();
    items.push_back(std::move(it));
  }
  return items;
}

json call_json(const CallResult& c) {
  json j;
  j["status"] = std::string(sandbox::status_name(c.status));
  if (c.status == Status::Ok) {
    j["output"] = c.repr;
  } else {
    j["error_type"] = c.error_type;
    j["message"] = c.message;
  }
  return j;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

CLI::App* add_exec_command(CLI::App& app, ExecOptions& o) {
  CLI::App* c = app.add_subcommand("exec", "Run Python through the sandbox exactly as training does");
  c->footer(
      "Each job prints one JSON object: status (ok, error, timeout, memory, output_limit, violation, crashed, "
      "internal_error), output (repr of the returned value, when ok), error_type and message (otherwise), "
      "stdout (when the program printed), wall_ms, cpu_ms.\n"
      "Exit status: 0 when every job ran, whatever the jobs' statuses; 1 if the sandbox failed; 2 on bad input.");
  c->add_option("file", o.file, "Python file defining the entry function")->check(CLI::ExistingFile);
  c->add_option("--input,-i", o.input, "argument list for the entry function, as Python source: 1, 'a', [2]");
  c->add_option("--jsonl", o.jsonl, "JSONL file (or - for stdin) of {\"program\": ..., \"input\": ...} lines")
      ->check(non_empty_path());
  c->add_option("--entry", o.entry, "name of the function to call")->capture_default_str();
  c->add_option("--timeout", o.timeout, "CPU seconds per job")->capture_default_str()
      ->check(between(sandbox::kMinCpuSeconds, sandbox::kMaxCpuSeconds));
  c->add_option("--wall-timeout", o.wall_timeout, "wall-clock seconds per job (0, the default: max(2*timeout, timeout+1))")
      ->check(between(0.0, 7200.0));
  c->add_option("--memory", o.memory_mib, "address-space limit per job, MiB")->capture_default_str()
      ->check(between(sandbox::kMinMemoryMib, sandbox::kMaxMemoryMib));
  // At most 128 MiB: the output travels back in one message with the results, and a message
  // stops at 256 MiB (framing.h), past which the worker is lost and the job an internal_error.
  c->add_option("--output-limit", o.output_limit, "stdout+stderr bytes per job (at most 128 MiB)")
      ->capture_default_str()
      ->check(between(0, 128 << 20));
  c->add_option("--workers", o.workers, "sandbox workers (default: one per CPU)")->check(between(0, 1024));
  c->add_option("--input-mode", o.input_mode,
                 "literal: every argument must be a Python literal (the safe default; what graders use for "
                 "model-written answers); expression: arguments are expressions evaluated in the sandbox "
                 "(CRUXEval-style inputs such as lambda x: x or dict(a=1))")
      ->check(CLI::IsMember({"literal", "expression"}))
      ->capture_default_str();
  c->add_flag("--determinism", o.determinism, "also run each job on a worker with another hash seed and report "
                                              "\"deterministic\"");
  return c;
}

int run_exec(const ExecOptions& o) {
  if (o.file.empty() == o.jsonl.empty())
    throw UsageError(o.file.empty() ? "exec: give a FILE.py or --jsonl FILE"
                                    : "exec: give either FILE.py or --jsonl FILE, not both");
  if (!o.jsonl.empty() && !o.input.empty()) throw UsageError("exec: --input goes with FILE.py, not --jsonl");

  std::vector<Item> items;
  if (!o.jsonl.empty()) {
    items = read_jsonl(o.jsonl);
  } else {
    items.push_back({json(), read_file(o.file), o.input});
  }

  sandbox::Limits limits;
  limits.cpu_seconds = o.timeout;
  limits.wall_seconds = o.wall_timeout;
  limits.memory_bytes = static_cast<uint64_t>(o.memory_mib * 1024 * 1024);
  limits.max_output_bytes = o.output_limit;

  sandbox::PoolOptions popts;
  popts.workers = o.workers;
  popts.alternate_workers = o.determinism ? -1 : 0;
  sandbox::Pool pool(popts);

  // Submit everything, then print in input order as results arrive.
  std::vector<uint64_t> ids, alt_ids;
  for (const auto& it : items) {
    sandbox::Job j;
    j.program = it.program;
    j.entry = o.entry;
    j.inputs = {it.input};
    j.limits = limits;
    j.input_mode = o.input_mode == "expression" ? sandbox::InputMode::Expression : sandbox::InputMode::Literal;
    ids.push_back(pool.submit(j));
    if (o.determinism) {
      j.seed = sandbox::SeedClass::Alternate;
      alt_ids.push_back(pool.submit(std::move(j)));
    }
  }
  bool all_ran = true;
  for (size_t i = 0; i < items.size(); ++i) {
    sandbox::JobResult r = pool.wait(ids[i]);
    const CallResult& c = r.calls.at(0);
    json j;
    if (!items[i].id.is_null()) j["id"] = items[i].id;
    j.update(call_json(c));
    if (!r.output.empty()) j["stdout"] = r.output;
    j["wall_ms"] = std::round(r.wall_seconds * 1e5) / 100;
    j["cpu_ms"] = std::round(r.cpu_seconds * 1e5) / 100;
    if (o.determinism) {
      sandbox::JobResult alt = pool.wait(alt_ids[i]);
      j["deterministic"] = sandbox::same_outcome(c, alt.calls.at(0));
      if (!j["deterministic"].get<bool>()) j["second_run"] = call_json(alt.calls.at(0));
      if (alt.calls.at(0).status == Status::Internal) all_ran = false;
    }
    if (c.status == Status::Internal) all_ran = false;
    std::cout << dump(j) << '\n';
  }
  std::cout.flush();
  return all_ran ? 0 : 1;
}

}  // namespace azr::cli
