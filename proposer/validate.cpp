#include "proposer/validate.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <utility>

namespace azr::proposer {
namespace sb = azr::sandbox;

namespace {

// The fixed checker. It runs in the sandbox on the untrusted source, passed as a str literal:
// the source is only parsed (ast.parse), never executed. Import checks follow the reference
// (checks.py): every dotted component of `import X.Y`, of `from M import n`'s M and of n is
// compared with the banned words. `__import__("time")`, importlib and the like are calls, not
// import statements, so they are out of scope here (as in the reference); the sandbox itself is
// what contains them.
constexpr const char* kChecker = R"PY(
import ast

def _parts(name):
    return [p for p in (name or '').split('.') if p]

def f(src, banned, reject_input_call):
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        return ('syntax_error', '%s: %s (line %s)' % (type(e).__name__, e.msg, e.lineno))
    except (ValueError, RecursionError, MemoryError, OverflowError) as e:
        return ('syntax_error', '%s: %s' % (type(e).__name__, e))
    banned = set(banned)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                hit = [p for p in _parts(a.name) if p in banned]
                if hit:
                    return ('banned_import', 'import %s (%s)' % (a.name, hit[0]))
        elif isinstance(node, ast.ImportFrom):
            mod = '.' * (node.level or 0) + (node.module or '')
            for a in node.names:
                hit = [p for p in _parts(node.module) + _parts(a.name) if p in banned]
                if hit:
                    return ('banned_import', 'from %s import %s (%s)' % (mod, a.name, hit[0]))
    if reject_input_call and 'input(' in src:
        return ('input_call', 'the program contains "input("')
    return ('ok', '')
)PY";

Check fail(std::string reason, std::string detail = "") { return Check{false, std::move(reason), std::move(detail)}; }

std::string status_detail(const sb::CallResult& r) {
  if (r.message.empty()) return r.error_type;
  if (r.error_type.empty()) return r.message;
  return r.error_type + ": " + r.message;
}

std::string static_input(const std::string& program, const std::vector<std::string>& banned, bool check_banned,
                         bool reject_input_call) {
  std::string in = python_str_literal(program) + ", [";
  if (check_banned) {
    for (size_t i = 0; i < banned.size(); ++i) {
      if (i) in += ", ";
      in += python_str_literal(banned[i]);
    }
  }
  in += "], ";
  in += reject_input_call ? "True" : "False";
  return in;
}

// Interprets the checker's (reason, detail) tuple.
Check static_outcome(const sb::CallResult& r) {
  // The checker is fixed code whose only input is the proposal's text, so whatever stops it (a
  // program too large to walk in time, a parser crash on deep nesting) is the proposal's doing:
  // were it internal_error, which the trainer masks, such a program would escape its penalty.
  // Only the sandbox's own failure is internal_error.
  if (r.status != sb::Status::Ok && r.status != sb::Status::Internal) {
    Check c = reason_for(r);
    c.detail = "static checker: " + c.detail;
    return c;
  }
  if (r.status != sb::Status::Ok || !r.value)
    return fail("internal_error", "static checker failed: " + status_detail(r));
  const auto& v = *r.value;
  if (v.kind() != sb::ValueKind::Tuple || v.items().size() != 2 || v.items()[0].kind() != sb::ValueKind::Str ||
      v.items()[1].kind() != sb::ValueKind::Str)
    return fail("internal_error", "static checker returned " + r.repr);
  Check c;
  c.reason = v.items()[0].as_bytes();
  c.detail = v.items()[1].as_bytes();
  c.ok = c.reason == "ok";
  return c;
}

// The first part of `v` whose repr ast.literal_eval cannot read back, or nullopt. Grading reads
// an output with literal_eval (solver/grade.h), so a task whose output holds one of these cannot
// be solved: a deduction answer of `inf` or `frozenset({4})` does not parse, and neither does the
// gold output an abduction answer is compared with.
std::optional<std::string> non_literal_part(const sb::Value& v) {
  auto non_finite = [](double x) { return !std::isfinite(x); };
  switch (v.kind()) {
    case sb::ValueKind::Float:
      if (non_finite(v.as_float())) return "a float that is " + sb::python_repr(v);
      return std::nullopt;
    case sb::ValueKind::Complex:
      if (non_finite(v.real()) || non_finite(v.imag())) return "a complex with a part that is inf or nan";
      return std::nullopt;
    case sb::ValueKind::ByteArray: return "a bytearray";
    case sb::ValueKind::FrozenSet: return "a frozenset";
    case sb::ValueKind::Ellipsis: return "Ellipsis";
    case sb::ValueKind::Tuple:
    case sb::ValueKind::List:
    case sb::ValueKind::Set:
      for (const sb::Value& item : v.items())
        if (auto part = non_literal_part(item)) return part;
      return std::nullopt;
    case sb::ValueKind::Dict:
      for (const auto& [key, value] : v.pairs()) {
        if (auto part = non_literal_part(key)) return part;
        if (auto part = non_literal_part(value)) return part;
      }
      return std::nullopt;
    default: return std::nullopt;
  }
}

// Judges one execution pair (primary, alternate).
Check execution_outcome(const sb::CallResult& first, const sb::CallResult& second, size_t max_chars) {
  Check c = reason_for(first);
  if (c.reason == "internal_error") {  // decides nothing if the other run failed on its own
    Check c2 = reason_for(second);
    if (c2.ok || c2.reason == "internal_error") return c;
    c2.detail = "(run with another hash seed) " + c2.detail;
    return c2;
  }
  if (!c.ok) return c;
  Check c2 = reason_for(second);
  if (!c2.ok) {
    if (c2.reason == "exception" || c2.reason == "unrepresentable")
      return fail("non_deterministic", "first run returned " + first.repr.substr(0, 200) +
                                           ", the run with another hash seed: " + c2.reason + " " + c2.detail);
    c2.detail = "(run with another hash seed) " + c2.detail;
    return c2;
  }
  if (!sb::same_outcome(first, second))
    return fail("non_deterministic",
                "hash seeds disagree: " + first.repr.substr(0, 200) + " vs " + second.repr.substr(0, 200));
  size_t n = utf8_length(first.repr);
  if (n > max_chars)
    return fail("output_too_large", "repr has " + std::to_string(n) + " characters (limit " +
                                        std::to_string(max_chars) + ")");
  if (first.value)
    if (auto part = non_literal_part(*first.value))
      return fail("output_not_literal", "the output holds " + *part + ", which is not a Python literal: " +
                                            first.repr.substr(0, 200));
  return Check{true, "ok", ""};
}

sb::Job run_job(const std::string& program, const std::string& input, const ValidateSettings& s, sb::SeedClass seed) {
  sb::Job j;
  j.op = sb::protocol::Op::RunProgram;
  j.program = program;
  j.inputs = {input};
  j.input_mode = s.input_mode;
  j.limits = s.limits;
  j.seed = seed;
  return j;
}

}  // namespace

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

std::string python_str_literal(const std::string& s) {
  std::string out = "'";
  out.reserve(s.size() + 16);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  char buf[8];
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '\\': out += "\\\\"; break;
        case '\'': out += "\\'"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20 || c == 0x7f) {
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    // Copy a well-formed UTF-8 sequence as is (no surrogates, no overlongs, <= U+10FFFF);
    // anything else becomes U+FFFD so the literal always decodes.
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    bool good = len > 0 && c <= 0xF4 && i + len <= n;
    for (size_t k = 1; good && k < len; ++k) good = (p[i + k] & 0xC0) == 0x80;
    if (good && len == 3) {
      if (c == 0xE0 && p[i + 1] < 0xA0) good = false;  // overlong
      if (c == 0xED && p[i + 1] >= 0xA0) good = false;  // surrogate
    }
    if (good && len == 4) {
      if (c == 0xF0 && p[i + 1] < 0x90) good = false;  // overlong
      if (c == 0xF4 && p[i + 1] >= 0x90) good = false;  // > U+10FFFF
    }
    if (good) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  out += "'";
  return out;
}

Check reason_for(const sb::CallResult& r) {
  switch (r.status) {
    case sb::Status::Ok: return Check{true, "ok", ""};
    case sb::Status::Error:
      if (r.error_type == sb::kUnrepresentable) return fail("unrepresentable", r.message);
      if (r.error_type == sb::kInputError) return fail("input_not_literal", r.message);
      return fail("exception", status_detail(r));
    case sb::Status::Timeout: return fail("timeout", status_detail(r));
    case sb::Status::Memory: return fail("memory", status_detail(r));
    case sb::Status::OutputLimit: return fail("output_too_large", status_detail(r));
    case sb::Status::Violation: return fail("violation", status_detail(r));
    case sb::Status::Crashed: return fail("crashed", status_detail(r));
    case sb::Status::Internal: return fail("internal_error", status_detail(r));
  }
  return fail("internal_error", "unknown status");
}

std::vector<ValidationResult> validate(sb::Pool& pool, const std::vector<Proposal>& proposals,
                                       const ValidateSettings& s) {
  std::vector<ValidationResult> out(proposals.size());
  // Inputs actually used per proposal (induction keeps the last `induction_inputs`).
  std::vector<std::vector<std::string>> inputs(proposals.size());
  for (size_t i = 0; i < proposals.size(); ++i) {
    const auto& p = proposals[i];
    if (p.type == buffer::TaskType::Induction) {
      size_t keep = std::min(p.inputs.size(), s.induction_inputs);
      inputs[i].assign(p.inputs.end() - static_cast<std::ptrdiff_t>(keep), p.inputs.end());
    } else {
      inputs[i] = {p.input};
    }
  }

  // Stage 1: static checks, one checker job per program.
  std::vector<sb::Job> jobs;
  sb::Limits static_limits = s.limits;
  jobs.reserve(proposals.size());
  for (const auto& p : proposals) {
    bool banned = p.type != buffer::TaskType::Induction || s.check_banned_for_induction;
    sb::Job j;
    j.op = sb::protocol::Op::RunProgram;
    j.program = kChecker;
    j.inputs = {static_input(p.program, s.banned_words, banned, s.reject_input_call)};
    j.input_mode = sb::InputMode::Literal;
    j.limits = static_limits;
    jobs.push_back(std::move(j));
  }
  auto stat = pool.run(std::move(jobs));
  std::vector<size_t> pending;
  for (size_t i = 0; i < proposals.size(); ++i) {
    Check c = stat[i].calls.size() == 1 ? static_outcome(stat[i].calls[0])
                                        : fail("internal_error", "static checker gave no result");
    if (c.ok && proposals[i].type == buffer::TaskType::Induction && inputs[i].size() < s.induction_min_inputs)
      c = fail("no_inputs", "induction proposal has " + std::to_string(inputs[i].size()) + " inputs");
    if (!c.ok) {
      out[i].check = std::move(c);
    } else {
      pending.push_back(i);
    }
  }

  // Stage 2: every (proposal, input) twice, primary and alternate seed, each in its own child.
  struct Ref {
    size_t proposal, input;
  };
  std::vector<Ref> refs;
  jobs.clear();
  for (size_t i : pending)
    for (size_t k = 0; k < inputs[i].size(); ++k) {
      refs.push_back({i, k});
      jobs.push_back(run_job(proposals[i].program, inputs[i][k], s, sb::SeedClass::Primary));
      jobs.push_back(run_job(proposals[i].program, inputs[i][k], s, sb::SeedClass::Alternate));
    }
  auto runs = pool.run(std::move(jobs));
  std::vector<std::vector<std::string>> outputs(proposals.size());
  for (size_t i : pending) {
    out[i].check = Check{true, "ok", ""};
    outputs[i].resize(inputs[i].size());
  }
  for (size_t r = 0; r < refs.size(); ++r) {
    auto [i, k] = refs[r];
    auto& a = runs[2 * r];
    auto& b = runs[2 * r + 1];
    // An earlier input already failed: that decides, unless the sandbox failed on it, which
    // decides nothing (the trainer masks internal_error, so it must not hide a known failure).
    const bool lost = out[i].check.reason == "internal_error";
    if (!out[i].check.ok && !lost) continue;
    Check c = (a.calls.size() == 1 && b.calls.size() == 1)
                  ? execution_outcome(a.calls[0], b.calls[0], s.max_output_chars)
                  : fail("internal_error", "no call result");
    if (lost && (c.ok || c.reason == "internal_error")) continue;
    if (!c.ok) {
      if (proposals[i].type == buffer::TaskType::Induction) c.detail = "input " + std::to_string(k) + ": " + c.detail;
      out[i].check = std::move(c);
      continue;
    }
    outputs[i][k] = std::move(a.calls[0].repr);
  }

  for (size_t i : pending) {
    if (!out[i].check.ok) continue;
    const auto& p = proposals[i];
    auto& t = out[i].task;
    t.type = p.type;
    t.origin = buffer::Origin::Proposed;
    t.program = p.program;
    if (p.type == buffer::TaskType::Induction) {
      t.inputs = inputs[i];
      t.outputs = std::move(outputs[i]);
      t.message = p.message;
    } else {
      t.input = p.input;
      t.output = std::move(outputs[i][0]);
    }
  }
  return out;
}

}  // namespace azr::proposer
