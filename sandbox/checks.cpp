#include "sandbox/checks.h"

#include <stdexcept>

namespace azr::sandbox {
namespace {

Job program_job(const EvalRequest& r, const Limits& limits, SeedClass seed, InputMode mode) {
  return run_program_job(r.program, {r.input}, limits, mode, seed);
}

CallResult single(JobResult&& r) {
  if (r.calls.size() != 1) throw std::logic_error("expected exactly one call result");
  return std::move(r.calls[0]);
}

}  // namespace

std::vector<CallResult> evaluate(Pool& pool, const std::vector<EvalRequest>& reqs, const Limits& limits,
                                 InputMode mode) {
  std::vector<Job> jobs;
  jobs.reserve(reqs.size());
  for (const auto& r : reqs) jobs.push_back(program_job(r, limits, SeedClass::Primary, mode));
  std::vector<CallResult> out;
  out.reserve(reqs.size());
  for (auto& r : pool.run(std::move(jobs))) out.push_back(single(std::move(r)));
  return out;
}

CallResult evaluate(Pool& pool, const std::string& program, const std::string& input, const Limits& limits,
                    InputMode mode) {
  return evaluate(pool, std::vector<EvalRequest>{{program, input}}, limits, mode).at(0);
}

bool same_outcome(const CallResult& a, const CallResult& b) {
  if (a.status != b.status) return false;
  if (a.status == Status::Ok) return python_equal(*a.value, *b.value, NanRule::Identical);
  return a.error_type == b.error_type;
}

std::vector<DeterminismResult> determinism(Pool& pool, const std::vector<EvalRequest>& reqs, const Limits& limits,
                                           InputMode mode) {
  std::vector<Job> jobs;
  jobs.reserve(reqs.size() * 2);
  for (const auto& r : reqs) {
    jobs.push_back(program_job(r, limits, SeedClass::Primary, mode));
    jobs.push_back(program_job(r, limits, SeedClass::Alternate, mode));
  }
  auto results = pool.run(std::move(jobs));
  std::vector<DeterminismResult> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    out[i].first = single(std::move(results[2 * i]));
    out[i].second = single(std::move(results[2 * i + 1]));
    out[i].deterministic = same_outcome(out[i].first, out[i].second);
  }
  return out;
}

std::vector<CallResult> parse_literals(Pool& pool, const std::vector<std::string>& literals, const Limits& limits) {
  return pool.run({parse_literals_job(literals, limits)}).at(0).calls;
}

std::vector<EqualsResult> check_equals(Pool& pool, const std::vector<EvalRequest>& reqs,
                                       const std::vector<std::string>& expected, const Limits& limits,
                                       InputMode mode) {
  if (reqs.size() != expected.size()) throw std::invalid_argument("check_equals: one expected value per request");
  // The expected literals are parsed in their own child: they never share a process with the
  // program whose output they judge.
  std::vector<Job> jobs;
  jobs.reserve(reqs.size() + 1);
  for (const auto& r : reqs) jobs.push_back(program_job(r, limits, SeedClass::Primary, mode));
  jobs.push_back(parse_literals_job(expected, limits));
  auto results = pool.run(std::move(jobs));
  std::vector<CallResult> parsed = std::move(results.back().calls);
  std::vector<EqualsResult> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    out[i].actual = single(std::move(results[i]));
    out[i].expected = std::move(parsed[i]);
    out[i].equal = out[i].actual.status == Status::Ok && out[i].expected.status == Status::Ok &&
                   python_equal(*out[i].actual.value, *out[i].expected.value);
  }
  return out;
}

std::vector<CallResult> run_on_inputs(Pool& pool, const std::string& program, const std::vector<std::string>& inputs,
                                      const Limits& limits, InputMode mode) {
  return pool.run({run_program_job(program, inputs, limits, mode)}).at(0).calls;
}

Job run_program_job(std::string program, std::vector<std::string> inputs, const Limits& limits, InputMode mode,
                    SeedClass seed) {
  Job j;
  j.op = protocol::Op::RunProgram;
  j.input_mode = mode;
  j.program = std::move(program);
  j.inputs = std::move(inputs);
  j.limits = limits;
  j.seed = seed;
  return j;
}

Job parse_literals_job(std::vector<std::string> literals, const Limits& limits) {
  Job j;
  j.op = protocol::Op::ParseLiterals;
  j.inputs = std::move(literals);
  j.limits = limits;
  return j;
}

}  // namespace azr::sandbox
