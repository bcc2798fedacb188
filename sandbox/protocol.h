#pragma once
// Messages between the supervisor (azr), a zygote (azr-zygote) and the zygote's children.
//
//   supervisor --Request--> zygote --fork--> child
//   child --result records on fd 3--> zygote --Response (raw records + captured output)--> supervisor
//
// The zygote never interprets what a child wrote: it relays the bytes, the exit status and why
// (if) it killed the child. The supervisor alone decides what a job's outcome is (outcome.h).
// On the stream socket every message is framed as u32 length + payload.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/limits.h"

namespace azr::sandbox::protocol {

enum class Op : uint8_t {
  // Parse every input as an argument list (`1, 'a', x=[2]`), then exec `program` and call
  // `entry(*args, **kwargs)` once per input, in order, in one child.
  RunProgram = 1,
  // Parse every input as one Python literal (no program runs). This is how expected answers
  // become values without the supervisor ever evaluating model text.
  ParseLiterals = 2,
};

// How a RunProgram input (the text inside `f(...)`) becomes arguments. Either way the text must
// parse as exactly one call of `f`, so "0) or (True" cannot turn the call into something else.
enum class InputMode : uint8_t {
  // Every argument is a Python literal, parsed before the program runs. Use this for anything
  // a solver writes: an expression could rewrite `f` (f.__code__ = ...) to return what it was
  // shown.
  Literal = 0,
  // Every argument is an expression, evaluated in the program's namespace after the program
  // ran, as `f(<input>)` would be (CRUXEval inputs use lambda, dict(...), range(...)).
  Expression = 1,
};

struct Request {
  uint64_t job_id = 0;
  Op op = Op::RunProgram;
  InputMode input_mode = InputMode::Literal;
  std::string program;
  std::string entry = "f";
  std::string module_name = "__main__";  // the program's __name__ (Job::module_name)
  std::vector<std::string> inputs;
  Limits limits;
  uint64_t nonce[2] = {0, 0};  // proves the done-record came from the harness, not user code
};

// How the child ended, as the zygote saw it.
enum class End : uint8_t {
  Exited = 1,        // code = exit status
  Signaled = 2,      // code = signal (SIGKILL here means the CPU timer or RLIMIT_CPU)
  KilledWall = 3,    // the zygote killed it at the wall-clock deadline
  KilledOutput = 4,  // the zygote killed it for exceeding the stdout/stderr cap
  KilledResult = 5,  // the zygote killed it for exceeding the result-bytes cap
  SpawnFailed = 6,   // fork/pipe failed in the zygote (an infrastructure error), code = errno
  LockdownFailed = 7,  // the child could not lock itself down and never ran the program (child_lockdown.h)
};

struct Response {
  uint64_t job_id = 0;
  End end = End::Exited;
  int32_t code = 0;
  double wall_seconds = 0;
  double cpu_seconds = 0;
  std::string records;  // what the child wrote on fd 3, verbatim
  std::string output;   // stdout+stderr, up to the cap
};

// Result records the child's harness writes on fd 3: one per input, then one done-record.
// Every record carries the job's nonce, which lives only in the harness's C++ memory: a program
// can write bytes to fd 3, but not a record the supervisor accepts, even if it then exits or
// gets itself killed before the harness would write the real one.
//   'R' u64 nonce0 u64 nonce1 u32 index u32 cpu_micros u8 status (RecordStatus below) ...
//        cpu_micros: the call's CPU time (0 where nothing was called)
//        ok:          u32 n, value wire bytes (sandbox/value.h)
//        otherwise:   str error_type, str message
//   'D' u64 nonce0 u64 nonce1 u32 count
enum class RecordStatus : uint8_t {
  Ok = 0,
  Exception = 1,       // the program raised (type name, message)
  InputError = 2,      // an input is not a literal argument list / literal
  Unrepresentable = 3, // the result holds a type the strict serializer refuses
  ResultTooLarge = 4,  // the encoded result exceeds limits.max_result_bytes
  MemoryError = 5,     // MemoryError raised (address-space limit)
  NoEntry = 6,         // the program defines no callable named `entry`
};

constexpr uint8_t kRecordResult = 'R';
constexpr uint8_t kRecordDone = 'D';

// The zygote's first message opens with kHelloMagic and the zygote's kProtocolVersion. Bump the
// version with any change to a message or record layout in this file: a supervisor and a zygote
// from different builds (an old azr-zygote left beside a new azr, AZR_ZYGOTE pointing at another
// build) then refuse each other at start-up, where they would otherwise misread every record
// (each job a "ForgedResult" violation, each proposal punished for it).
constexpr uint32_t kHelloMagic = 0x5a525a41;  // "AZRZ" as little-endian bytes
// 1: the first versioned layout (result records carry cpu_micros; End::LockdownFailed).
// 2: a request carries the program's module name after its entry (Job::module_name).
constexpr uint32_t kProtocolVersion = 2;

// decode_hello's error when the zygote speaks another protocol, or predates versions.
struct ProtocolMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the zygote managed to set up. `fatal` non-empty means it could not start and will exit;
// warnings are things it could not do but can run without.
struct Hello {
  uint32_t version = kProtocolVersion;  // encode writes this (tests forge other versions)
  std::string fatal;
  std::string python_version;
  uint32_t preimports = 0;
  std::vector<std::string> missing_preimports;
  std::vector<std::string> warnings;
  bool filesystem_hidden = false;
  uint32_t bpf_instructions = 0;
  int32_t pid_in_namespace = 0;  // 1 when the zygote leads its own pid namespace
};

std::string encode(const Hello& h);
// Throws ProtocolMismatch (which names both versions) before reading anything else when the
// payload is not this protocol's, wire::Error when it is malformed.
Hello decode_hello(std::string_view payload);
std::string encode(const Request& r);
Request decode_request(std::string_view payload);
std::string encode(const Response& r);
// encode(r) in the pieces around its two large fields: head + r.records + middle + r.output,
// which the zygote sends as they are instead of copying the records into one more buffer.
struct ResponsePieces {
  std::string head, middle;
};
ResponsePieces encode_pieces(const Response& r);
Response decode_response(std::string_view payload);

}  // namespace azr::sandbox::protocol
