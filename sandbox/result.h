#pragma once
// Typed results of sandboxed jobs. Infrastructure failures (internal_error) are kept apart from
// "the program is wrong" so the trainer can mask them out instead of scoring them.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/limits.h"
#include "sandbox/protocol.h"
#include "sandbox/value.h"

namespace azr::sandbox {

enum class Status : uint8_t {
  Ok,           // returned a value (value + repr set)
  Error,        // raised (error_type, message), or the input/result was not a literal
  Timeout,      // CPU budget or wall clock exceeded
  Memory,       // MemoryError (address-space limit)
  OutputLimit,  // stdout/stderr or the result exceeded its cap
  Violation,    // a denied system call (SIGSYS) or a forged/malformed result stream
  Crashed,      // died by another signal, or exited without a result
  Internal,     // the sandbox itself failed (worker lost, fork failed); not the program's fault
};

std::string_view status_name(Status s);  // "ok", "error", ..., "internal_error"

enum class SeedClass : uint8_t {
  Primary,    // the pool's fixed hash seed: every ordinary job runs here, reproducibly
  Alternate,  // a different hash seed (and address layout): the second run of a determinism check
};

struct Job {
  protocol::Op op = protocol::Op::RunProgram;
  std::string program;             // source defining `entry` (RunProgram)
  std::string entry = "f";
  // The program's `__name__`. A script's ("__main__") for the tasks, as the reference runs them;
  // code benchmarks give "builtins", which is what `__name__` reads as under EvalPlus's
  // exec(code, {}), so a candidate's `if __name__ == "__main__":` block stays off there too.
  std::string module_name = "__main__";
  std::vector<std::string> inputs; // argument lists (RunProgram) or literals (ParseLiterals)
  protocol::InputMode input_mode = protocol::InputMode::Literal;
  Limits limits;
  SeedClass seed = SeedClass::Primary;
};

// error_type values the sandbox itself assigns when the status is Error. They contain a dot, so
// no program can produce them: an exception's type name is reported without its module part
// (a program raising its own `class InputError` is reported as "InputError", not as these).
inline constexpr const char* kInputError = "sandbox.InputError";            // input is not a (literal) argument list
inline constexpr const char* kUnrepresentable = "sandbox.UnrepresentableResult";  // result is not plain data

struct CallResult {
  Status status = Status::Internal;
  std::optional<Value> value;  // when ok
  std::string repr;            // when ok: exactly Python's repr(value)
  std::string error_type;      // when not ok: exception type or a reason code
  std::string message;
  // The call's CPU time in the child (its input's evaluation and the call, not the encoding of
  // the result), from the harness's record; 0 where there is no record or nothing was called.
  double cpu_seconds = 0;
};

struct JobResult {
  uint64_t id = 0;
  std::vector<CallResult> calls;  // one per input, in input order
  std::string output;             // the child's stdout+stderr (capped)
  double wall_seconds = 0;
  double cpu_seconds = 0;
  int worker = -1;
};

// Turns what a zygote reported into one CallResult per input. Pure: the supervisor's whole
// judgement of a child lives here (records are trusted only as far as they parse; exit status
// 0 alone never means success).
JobResult interpret(const Job& job, const protocol::Response& resp, const uint64_t nonce[2]);

}  // namespace azr::sandbox
