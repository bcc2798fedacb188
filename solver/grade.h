#pragma once
// Grading of solver answers (already extracted from the response) against buffer tasks, in the
// sandbox, batched (every job of a batch goes to the pool in one Pool::run, and the induction
// answers' other hidden inputs in a second: GradeSettings::induction_first_pair_first). Nothing the solver
// wrote is parsed or evaluated in this process (METHOD.md, reference §5):
//   deduction  the answer and the task's output are parsed as Python literals in the sandbox and
//              compared by value (sets/dicts unordered, 1 == 1.0, nan never equal). An answer that
//              is not a literal (`0) or (True`, a call, a name) is wrong and never executed.
//   abduction  the task program runs on the answer as its argument list (InputMode::Literal: only
//              literals), and the result is compared by value with the task's output.
//   induction  the answer program runs on each hidden input (inputs[n/2:]), each in its own child;
//              correct iff every hidden output is reproduced (binary, §5.3); accuracy = the pairs
//              reproduced (of those run) over the hidden pairs.
// Every program runs in a child of its own, one input each, as validation ran it; the same run
// asked for by several answers (rollouts that wrote the same answer) runs once. The literals
// (deduction answers, the tasks' outputs) are parsed in children that run no program, each
// distinct text once, many to a child (GradeSettings::share_jobs).
//
// Reason codes (Grade::reason):
//   ok                 correct
//   wrong              ran (or parsed) fine, value differs
//   not_a_literal      deduction answer not a literal / abduction answer not a literal argument list
//   exception          the program raised (abduction: the task program on the answer; induction:
//                      the answer program) -- detail "Type: message"
//   timeout, memory, output_too_large, violation, crashed, unrepresentable
//   bad_task           the task itself is unusable (its output is not a literal or hits a limit
//                      when parsed alone, no hidden pairs)
//   internal_error     the sandbox failed (not the answer's fault; callers may mask it out)
// Induction: the first failing hidden pair decides the reason; detail starts with "hidden <k>: ".
// A pair the sandbox failed on (internal_error) is the reason only when no other pair failed.
#include <cstddef>
#include <string>
#include <vector>

#include "buffer/task_buffer.h"
#include "sandbox/checks.h"

namespace azr::solver {

struct GradeSettings {
  sandbox::Limits limits;  // per execution / per parse job
  // How an abduction answer becomes arguments. Literal (training's default): only literals, since
  // an expression could rewrite `f` (f.__code__ = ...) and collect the reward without solving.
  // Expression: evaluated in the program's namespace after it ran, as the reference's
  // `f(<answer>)` does; for answers no reward depends on (benchmark gold inputs such as
  // CRUXEval's `dict(...)` and `lambda` ones, evaluation).
  sandbox::InputMode abduction_input_mode = sandbox::InputMode::Literal;
  // true: each distinct run (program, input, input mode) is one job, and each distinct literal is
  // parsed once, many to a parse job, with the result it gets alone (solver/literal_parses.h).
  // A run's result is the one each answer would get from a run of its own wherever the program
  // gives one result (a validated task's program was run twice to show it does); only a program
  // near a limit or drawing on `random` could give equal answers different grades, and shared
  // they get one. false: a job per run and a parse job per answer, as grading did before
  // 2026-11-28 (task_engine_bench's baseline).
  bool share_jobs = true;
  // true: an induction answer runs on its first hidden input first, and on the others only where
  // that one was reproduced (or lost by the sandbox). correct, reason and detail are what running
  // every input gives (the first failing pair decides them); accuracy counts the pairs that ran,
  // so an answer wrong on its first is 0. A program that never ends costs one child at the CPU
  // limit, not one per hidden input: in the quickstart's steps, 5 such answers took 4 of the 5 s
  // the sandbox spent (bench/RESULTS.md). One more round trip to the pool where any answer goes on.
  bool induction_first_pair_first = true;
};

struct Answer {
  size_t task = 0;   // index into the tasks vector
  std::string text;  // deduction: output literal; abduction: argument list; induction: program
};

struct Grade {
  bool correct = false;
  double accuracy = 0;  // deduction/abduction: 0 or 1; induction: pairs reproduced (of those run) / hidden pairs
  std::string reason;
  std::string detail;
};

// One grade per answer, in order. Throws std::out_of_range if an answer names no task.
std::vector<Grade> grade(sandbox::Pool& pool, const std::vector<buffer::Task>& tasks,
                         const std::vector<Answer>& answers, const GradeSettings& settings = {});

// Convenience: one answer per task, answers[i] for tasks[i].
std::vector<Grade> grade(sandbox::Pool& pool, const std::vector<buffer::Task>& tasks,
                         const std::vector<std::string>& answers, const GradeSettings& settings = {});

}  // namespace azr::solver
