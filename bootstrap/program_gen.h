#pragma once
// The zero-human-data program generator: random small Python functions `def f(...)` built from a
// grammar of safe, deterministic constructs (int arithmetic with literal divisors, guarded
// indexing, string/list/dict operations, if/else, bounded loops, accumulators, comprehensions),
// with random literal argument lists of matching types. generate_tasks turns them into real
// tasks by running them in the sandbox (proposer/validate.h), so a tiny model can learn the
// task formats before self-play.
//
// Everything is a pure function of the seed: the generator draws from its own std::mt19937_64
// (whose output the standard fixes) through its own integer->range mapping, so the same seed
// gives the same text on every platform. No global state.
//
// Type tracking: every variable in scope has a type (int, str, list of int, dict str->int) and,
// for lists/dicts, whether it is known to be non-empty; `xs[0]`, `max(xs)` and `xs[i % len(xs)]`
// are only generated on lists known to be non-empty (list and dict inputs always are). Divisors
// are nonzero literals; `range(...)` only takes literals, lengths or unmodified int parameters,
// and the variable behind its bound is not modified in the loop's body; a list or dict is never
// mutated while it is iterated, and list variables are never aliased.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "buffer/task_buffer.h"
#include "sandbox/pool.h"

namespace azr::bootstrap {

struct GenSettings {
  // Top-level statements of f's body before the final `return` (an `if`/`for` counts as one,
  // whatever it holds); the count is drawn uniformly in [min, max].
  int min_statements = 1, max_statements = 4;
  // Deepest block nesting: 0 = no if/for at all, 1 = if/for bodies hold simple statements only.
  int max_depth = 2;
  int max_int = 9;       // int inputs and literals in [-max_int, max_int] (mostly non-negative)
  int max_list_len = 4;  // list inputs have 1..max_list_len elements (never empty)
  int max_str_len = 5;   // str inputs have 0..max_str_len letters from 'abcde'
  bool strings = true, lists = true, dicts = false, loops = true, conditionals = true, comprehensions = true;
  int min_params = 1, max_params = 3;
  size_t max_program_chars = 300;  // longer candidates are redrawn (from the same stream)
  size_t max_output_chars = 100;   // generate_tasks: repr longer than this -> output_too_large
};

// Difficulty presets: 0 = easy (1-2 statements, depth 1, up to 2 parameters: ints, strings and
// lists, no comprehensions), 1 = medium (the defaults), 2 = hard (2-5 statements, depth 2, dicts
// on, larger values). Other levels clamp. No preset returns a bool or None: outputs are ints,
// strings, lists, tuples and (hard) dicts.
GenSettings preset(int level);

struct GeneratedProgram {
  std::string program;              // "def f(...):\n    ...\n    return ..."
  std::vector<std::string> inputs;  // literal argument lists, e.g. "3, [1, 2], 'ab'"
  std::vector<std::string> params;  // parameter names in order
  std::vector<std::string> param_types;  // "int", "str", "list", "dict"
};

// One program with `n_inputs` argument lists (distinct where the value ranges allow).
GeneratedProgram generate_program(uint64_t seed, const GenSettings& s, int n_inputs);

// A short description for an induction task of this program ("f takes an int and a string. ...").
std::string induction_message(const GeneratedProgram& p, uint64_t seed);

struct TaskGenReport {
  int64_t attempted = 0, valid = 0;
  std::map<std::string, int64_t> rejected;  // validate's reason codes, plus "duplicate" and
                                            // (induction) "constant_output"
};

// Real tasks of `type`: programs are generated from seeds seed, seed+1, ..., executed in the
// sandbox with proposer::validate (parse, determinism across two hash seeds, output size,
// exceptions -> discarded), and the valid ones returned in seed order with their outputs, until
// `count` tasks or `max_attempts` programs (0 = 20 x count). Deduction/abduction tasks have one
// input; induction tasks have `induction_inputs` inputs, their outputs and a message (and are
// rejected as constant_output when every output is the same). Tasks have origin Seed, step 0.
// Deterministic for a given seed (barring sandbox timeouts on an overloaded machine).
// Needs a pool with alternate workers (the default PoolOptions).
std::vector<buffer::Task> generate_tasks(sandbox::Pool& pool, buffer::TaskType type, int count, uint64_t seed,
                                         const GenSettings& s, TaskGenReport* report = nullptr,
                                         int induction_inputs = 10, int max_attempts = 0);

// The tasks of `tasks` whose program is no program of `others`, in order, at most `limit` of them
// (-1: all). A held-out set and the training set share no program, not only no task (a task's
// fingerprint is its program with its inputs): an induction task's answer is its program, so a
// held-out induction task on a program trained with other inputs is a task seen in training.
std::vector<buffer::Task> without_programs_of(std::vector<buffer::Task> tasks, const std::vector<buffer::Task>& others,
                                              int64_t limit = -1);

}  // namespace azr::bootstrap
