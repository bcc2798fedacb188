// The supervisor's verdict on one child: what each input's call amounted to.
#include <signal.h>
#include <string.h>

#include <fmt/format.h>

#include "sandbox/result.h"
#include "sandbox/wire.h"

namespace azr::sandbox {

std::string_view status_name(Status s) {
  switch (s) {
    case Status::Ok: return "ok";
    case Status::Error: return "error";
    case Status::Timeout: return "timeout";
    case Status::Memory: return "memory";
    case Status::OutputLimit: return "output_limit";
    case Status::Violation: return "violation";
    case Status::Crashed: return "crashed";
    case Status::Internal: return "internal_error";
  }
  return "internal_error";
}

namespace {

CallResult make(Status s, std::string type, std::string message) {
  CallResult c;
  c.status = s;
  c.error_type = std::move(type);
  c.message = std::move(message);
  return c;
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// What happened to the calls that produced no record, from how the child ended.
CallResult from_end(const protocol::Response& resp, const Limits& limits) {
  using protocol::End;
  switch (resp.end) {
    case End::KilledWall:
      return make(Status::Timeout, "WallTimeout",
                  fmt::format("exceeded the wall-clock limit of {:g} s", limits.effective_wall_seconds()));
    case End::KilledOutput:
      return make(Status::OutputLimit, "OutputLimit",
                  "wrote more than " + std::to_string(limits.max_output_bytes) + " bytes to stdout/stderr");
    case End::KilledResult:
      return make(Status::OutputLimit, "ResultLimit",
                  "wrote more than " + std::to_string(limits.max_result_bytes) + " result bytes");
    case End::SpawnFailed:
      return make(Status::Internal, "SpawnFailed", std::string("could not start the child: ") + strerror(resp.code));
    case End::Signaled:
      if (resp.code == SIGKILL || resp.code == SIGXCPU)
        return make(Status::Timeout, "CpuTimeout",
                    fmt::format("exceeded the CPU limit of {:g} s", limits.cpu_seconds));
      if (resp.code == SIGSYS)
        return make(Status::Violation, "DeniedSyscall", "killed by the seccomp policy (a forbidden system call)");
      return make(Status::Crashed, signal_text(resp.code), "killed by " + signal_text(resp.code));
    case End::LockdownFailed:  // never ran the program (the zygote saw the lockdown's own byte)
      return make(Status::Internal, "LockdownFailed", "the child could not apply the sandbox policy");
    case End::Exited:  // any status, 121 (kLockdownFailed) too: a program can exit with it
      return make(Status::Crashed, "NoResult",
                  "exited with status " + std::to_string(resp.code) + " without a result");
  }
  return make(Status::Internal, "Unknown", "unknown end");
}

CallResult from_record(wire::Reader& rd, const Limits& limits) {
  auto st = static_cast<protocol::RecordStatus>(rd.u8());
  using protocol::RecordStatus;
  if (st == RecordStatus::Ok) {
    std::string_view bytes = rd.str();
    CallResult c;
    c.value = decode_value(bytes);  // throws on anything the harness would not have written
    try {
      c.repr = python_repr(*c.value, static_cast<size_t>(limits.max_result_bytes));
      c.status = Status::Ok;
    } catch (const ReprError& e) {
      c.value.reset();
      // Python's repr itself fails on > 4300-digit ints; anything else is our size cap.
      if (std::string_view(e.what()).find("4300") != std::string_view::npos)
        return make(Status::Error, "ValueError", e.what());
      return make(Status::OutputLimit, "ResultLimit", e.what());
    }
    return c;
  }
  std::string type(rd.str());
  std::string message(rd.str());
  switch (st) {
    case RecordStatus::Exception:
      if (type == "MemoryError") return make(Status::Memory, type, message);
      return make(Status::Error, type, message);
    case RecordStatus::InputError:
      return make(Status::Error, kInputError, type + ": " + message);
    case RecordStatus::Unrepresentable:
      return make(Status::Error, kUnrepresentable, message);
    case RecordStatus::ResultTooLarge:
      return make(Status::OutputLimit, "ResultLimit", message);
    default:
      throw wire::Error("unknown record status");
  }
}

}  // namespace

JobResult interpret(const Job& job, const protocol::Response& resp, const uint64_t nonce[2]) {
  JobResult out;
  out.id = resp.job_id;
  out.output = resp.output;
  out.wall_seconds = resp.wall_seconds;
  out.cpu_seconds = resp.cpu_seconds;
  const size_t n = job.inputs.size();
  out.calls.reserve(n);

  if (resp.end == protocol::End::SpawnFailed) {
    out.calls.assign(n, from_end(resp, job.limits));
    return out;
  }

  // Records must arrive in order, one per input, then the done-record with this job's nonce.
  // A child killed mid-write may leave a truncated tail; that is not forgery. Anything else
  // that fails to parse means the program wrote on fd 3 itself: a violation for every call.
  bool done = false;
  bool malformed = false;
  std::string why;
  wire::Reader rd(resp.records);
  try {
    while (rd.remaining() > 0 && !done) {
      uint8_t kind = rd.u8();
      if (kind != protocol::kRecordResult && kind != protocol::kRecordDone) throw wire::Error("unknown record kind");
      uint64_t a = rd.u64(), b = rd.u64();
      if (a != nonce[0] || b != nonce[1]) throw wire::Error("record without this job's nonce");
      if (kind == protocol::kRecordResult) {
        uint32_t index = rd.u32();
        if (index != out.calls.size() || index >= n) throw wire::Error("record out of order");
        const uint32_t micros = rd.u32();
        out.calls.push_back(from_record(rd, job.limits));
        out.calls.back().cpu_seconds = double(micros) * 1e-6;
      } else {
        if (rd.u32() != n || out.calls.size() != n) throw wire::Error("done-record does not match the job");
        done = true;
      }
    }
    if (done && rd.remaining() != 0) throw wire::Error("bytes after the done-record");
  } catch (const std::exception& e) {
    // Truncation of a killed child is fine; truncation after a clean exit is not.
    bool truncated = std::string_view(e.what()) == "message truncated";
    bool killed = resp.end != protocol::End::Exited;
    if (!(truncated && killed)) {
      malformed = true;
      why = e.what();
    }
  }

  if (malformed) {
    out.calls.assign(n, make(Status::Violation, "ForgedResult",
                             "the result stream was not written by the harness (" + why + ")"));
    return out;
  }
  const bool flooded = resp.end == protocol::End::KilledOutput || resp.end == protocol::End::KilledResult;
  if (done && !flooded) return out;
  // Calls without a record take the child's fate; a flood counts against the whole job even if
  // every call had already produced its record.
  CallResult fate = from_end(resp, job.limits);
  if (done) out.calls.clear();
  while (out.calls.size() < n) out.calls.push_back(fate);
  return out;
}

}  // namespace azr::sandbox
