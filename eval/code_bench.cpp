#include "eval/code_bench.h"

#include "eval/evalplus_inputs.h"
#include "eval/json_python.h"

#include "sandbox/preimports.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "sandbox/result.h"
#include "sandbox/value.h"
#include "sandbox/work_key.h"

namespace azr::eval {
namespace {

using detail::JsonCursor;
using sandbox::Status;
using sandbox::Value;
using sandbox::ValueKind;

// Top-level object -> field name -> raw JSON text.
std::map<std::string, std::string_view> split_object(std::string_view line) {
  JsonCursor c{line};
  std::map<std::string, std::string_view> fields;
  c.expect('{');
  bool first = true;
  while (c.peek() != '}') {
    if (!first) c.expect(',');
    first = false;
    auto key_raw = c.raw_value();
    std::string key = nlohmann::json::parse(key_raw).get<std::string>();
    c.expect(':');
    fields[key] = c.raw_value();
  }
  ++c.i;
  c.ws();
  if (c.i != line.size()) c.fail("trailing characters");
  return fields;
}

std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::error_code ec;  // a directory opens as a stream and reads as empty
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw std::runtime_error(path.string() + ": not a file");
  std::string data;
  if (path.extension() == ".gz") {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error("cannot open " + path.string());
    char buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) data.append(buf, static_cast<size_t>(n));
    int err = 0;
    const char* msg = gzerror(f, &err);
    std::string emsg = err < 0 ? msg : "";
    gzclose(f);
    if (n < 0 || err < 0) throw std::runtime_error(path.string() + ": gzip error: " + emsg);
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    data = ss.str();
  }
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();
    std::string line = data.substr(start, end - start);
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(std::move(line));
    else lines.emplace_back();  // keep numbering; skipped below
    start = end + 1;
  }
  return lines;
}

std::string str_field(const std::map<std::string, std::string_view>& f, const std::string& key) {
  auto it = f.find(key);
  if (it == f.end()) throw std::runtime_error("missing field '" + key + "'");
  auto j = nlohmann::json::parse(it->second);
  if (!j.is_string()) throw std::runtime_error("field '" + key + "' is not a string");
  return j.get<std::string>();
}

std::string python_str_literal(std::string_view text) {
  std::string json = nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  JsonCursor c{json};
  std::string out;
  c.string_to_python(out);
  return out;
}

// EvalPlus picks an MBPP+ oracle by the entry point's name. Its lists also name
// intersection_array, are_equivalent and sum_div, which MbppPlus v0.2.0 no longer has.
PlusOracle mbpp_plus_oracle(const std::string& entry) {
  for (const char* e : {"similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly", "larg_nnum",
                        "find_dissimilar", "Diff"})
    if (entry == e) return PlusOracle::SetEqual;
  for (const char* e : {"check_str", "text_match_three", "text_starta_endb"})
    if (entry == e) return PlusOracle::NotNone;
  if (entry == "surface_Area" || entry == "digit_distance_nums") return PlusOracle::OrReference;
  return PlusOracle::Equal;
}

CodeProblem parse_item(const std::string& name, const std::string& line) {
  auto f = split_object(line);
  CodeProblem p;
  if (name == "humaneval" || name == "humanevalplus") {
    p.id = str_field(f, "task_id");
    p.prompt = str_field(f, "prompt");
    p.entry_point = str_field(f, "entry_point");
    p.canonical_solution = p.prompt + str_field(f, "canonical_solution");
    if (name == "humaneval") p.test = str_field(f, "test") + "\n\ncheck(" + p.entry_point + ")\n";
    if (name == "humanevalplus" && p.entry_point == "find_zero") p.oracle = PlusOracle::FindZero;
  } else if (name == "mbpp") {
    auto j = nlohmann::json::parse(line);
    p.id = "Mbpp/" + std::to_string(j.at("task_id").get<int>());
    std::vector<std::string> tests = j.at("test_list");
    if (tests.empty()) throw std::runtime_error("empty test_list");
    p.prompt = j.at("text").get<std::string>() + "\n" + tests[0] + "\n";
    p.canonical_solution = j.at("code").get<std::string>();
    // The entry point: the function the first assert calls.
    const std::string& t = tests[0];
    size_t a = t.find("assert");
    size_t k = a == std::string::npos ? 0 : a + 6;
    while (k < t.size() && !(isalpha(static_cast<unsigned char>(t[k])) || t[k] == '_')) ++k;
    // skip wrappers such as set(...), math.isclose(...), abs(...) by taking the identifier
    // followed by '(' that the canonical solution defines
    std::string found;
    for (size_t q = k; q < t.size(); ++q) {
      if (!(isalpha(static_cast<unsigned char>(t[q])) || t[q] == '_')) continue;
      if (q > 0 && (isalnum(static_cast<unsigned char>(t[q - 1])) || t[q - 1] == '_' || t[q - 1] == '.')) continue;
      size_t e = q;
      while (e < t.size() && (isalnum(static_cast<unsigned char>(t[e])) || t[e] == '_')) ++e;
      std::string id = t.substr(q, e - q);
      size_t paren = e;
      while (paren < t.size() && t[paren] == ' ') ++paren;
      if (paren < t.size() && t[paren] == '(' && p.canonical_solution.find("def " + id) != std::string::npos) {
        found = id;
        break;
      }
      q = e;
    }
    if (found.empty()) throw std::runtime_error("cannot find the entry point of " + p.id);
    p.entry_point = found;
    std::string setup = j.value("test_setup_code", "");
    p.test = setup + (setup.empty() ? "" : "\n");
    for (const auto& s : tests) p.test += s + "\n";
  } else {  // mbppplus
    p.id = str_field(f, "task_id");
    p.prompt = str_field(f, "prompt");
    p.entry_point = str_field(f, "entry_point");
    p.canonical_solution = str_field(f, "canonical_solution");
    p.oracle = mbpp_plus_oracle(p.entry_point);
  }
  if (name == "humanevalplus" || name == "mbppplus") {
    for (const char* key : {"base_input", "plus_input"}) {
      auto it = f.find(key);
      if (it == f.end()) throw std::runtime_error(std::string("missing field '") + key + "'");
      for (auto& a : evalplus_argument_lists(it->second, p.id)) p.plus_inputs.push_back(std::move(a));
      if (std::string(key) == "base_input") p.base_inputs = p.plus_inputs.size();
    }
    auto it = f.find("atol");
    if (it != f.end()) p.atol = nlohmann::json::parse(it->second).get<double>();
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Grading.

bool is_number(const Value& v) {
  return v.kind() == ValueKind::Int || v.kind() == ValueKind::Float || v.kind() == ValueKind::Bool;
}
double as_double(const Value& v) {
  if (v.kind() == ValueKind::Float) return v.as_float();
  if (v.kind() == ValueKind::Bool) return v.as_bool() ? 1 : 0;
  if (const auto small = v.as_small_int()) return static_cast<double>(*small);
  const sandbox::BigInt b = v.as_int();
  double r = 0;
  for (size_t k = b.limbs.size(); k-- > 0;) r = r * 4294967296.0 + b.limbs[k];
  return b.negative ? -r : r;
}

// EvalPlus's is_floats: a float, or a non-empty list or tuple of nothing but floats.
bool is_floats(const Value& v) {
  if (v.kind() == ValueKind::Float) return true;
  if (v.kind() != ValueKind::List && v.kind() != ValueKind::Tuple) return false;
  if (v.items().empty()) return false;
  for (const Value& item : v.items())
    if (item.kind() != ValueKind::Float) return false;
  return true;
}

// np.allclose(out, exp, rtol=1e-7, atol): numbers within atol + rtol * |exp| (NaN never, an
// infinity only itself), sequences of one length element by element (numpy reads a tuple and a
// list alike); anything else is an error there, so not close.
bool all_close(const Value& out, const Value& exp, double atol) {
  if (is_number(out) && is_number(exp)) {
    const double a = as_double(out), b = as_double(exp);
    if (std::isnan(a) || std::isnan(b)) return false;
    if (std::isinf(a) || std::isinf(b)) return a == b;
    return std::fabs(a - b) <= atol + 1e-7 * std::fabs(b);
  }
  auto seq = [](const Value& v) { return v.kind() == ValueKind::List || v.kind() == ValueKind::Tuple; };
  if (!seq(out) || !seq(exp) || out.items().size() != exp.items().size()) return false;
  for (size_t k = 0; k < out.items().size(); ++k)
    if (!all_close(out.items()[k], exp.items()[k], atol)) return false;
  return true;
}

std::string clip(std::string s, size_t n = 300) {
  if (s.size() > n) s = s.substr(0, n) + "...";
  return s;
}

CodeVerdict verdict_of_failure(const sandbox::CallResult& c, const std::string& output) {
  CodeVerdict v;
  v.passed = false;
  switch (c.status) {
    case Status::Ok: v.reason = "failed_test"; break;  // returned, but not True
    case Status::Error:
      if (c.error_type == "AssertionError") v.reason = "failed_test";
      else if (c.error_type == "SyntaxError" || c.error_type == "IndentationError" || c.error_type == "TabError")
        v.reason = "syntax_error";
      else if (c.error_type == "sandbox.NoEntry" || c.error_type.find("NoEntry") != std::string::npos)
        v.reason = "no_entry";
      else v.reason = "exception";
      break;
    case Status::Timeout: v.reason = "timeout"; break;
    case Status::Memory: v.reason = "memory"; break;
    default: v.reason = std::string(sandbox::status_name(c.status)); break;
  }
  v.detail = clip(c.error_type + (c.message.empty() ? "" : ": " + c.message));
  if (v.detail.empty() || v.detail == ": ") v.detail = clip(output);
  return v;
}

constexpr const char* kOracleEntry = "__azr_oracle__";

// EvalPlus's second references (_special_oracle.py), as Python run on the call's arguments; an
// argument they cannot read (EvalPlus would raise) accepts nothing.
std::string other_reference(const CodeProblem& p) {
  if (p.entry_point == "surface_Area")  // the slant height from the perpendicular one
    return "        base_edge, height = args\n"
           "        slant = m_.sqrt((base_edge / 2) ** 2 + height ** 2)\n"
           "        return out, b_.abs(out - b_.round(base_edge ** 2 + 4 * (base_edge * slant) / 2)) <= " +
           python_float(p.atol) + "\n";
  // digit_distance_nums: the shorter number zero-padded
  return "        x, y = b_.str(args[0]), b_.str(args[1])\n"
         "        n = b_.max(b_.len(x), b_.len(y))\n"
         "        other = b_.sum(b_.abs(b_.int(i) - b_.int(j)) for i, j in b_.zip(x.zfill(n), y.zfill(n)))\n"
         "        return out, (out == other) is True\n";
}

// A plus-input job's program: the candidate's (or the canonical solution's) with the oracle's
// wrapper after it, which calls the entry point and returns what the oracle compares. The wrapper
// runs in the program's namespace, as EvalPlus's oracle code runs beside the candidate; it takes
// its functions from the builtins and math modules, so a candidate's own `abs` or `sum` is not
// the oracle's.
std::string plus_program(const CodeProblem& p, const std::string& program, bool canonical) {
  const std::string head = program + "\n\n\ndef " + kOracleEntry +
                           "(*args):\n    import builtins as b_, math as m_\n    out = " + p.entry_point + "(*args)\n";
  switch (p.oracle) {
    case PlusOracle::Equal: return program;
    case PlusOracle::SetEqual:  // the answer as returned, where the tolerance could read it
      return head + "    return {*out}, (out if b_.type(out) in (b_.list, b_.tuple, b_.float) else None)\n";
    case PlusOracle::NotNone:
      return head + (canonical ? "    return out is not None\n"
                               : "    return out if out is True or out is False else out is not None\n");
    case PlusOracle::FindZero:
      return head + "    return b_.abs(b_.sum(c * m_.pow(out, i) for i, c in b_.enumerate(args[0]))) <= " +
             python_float(p.atol) + "\n";
    case PlusOracle::OrReference:
      if (canonical) return program;
      return head + "    try:\n" + other_reference(p) + "    except b_.Exception:\n        return out, False\n";
  }
  return program;
}

std::string plus_entry(const CodeProblem& p, bool canonical) {
  const bool wrapped = p.oracle != PlusOracle::Equal && !(canonical && p.oracle == PlusOracle::OrReference);
  return wrapped ? kOracleEntry : p.entry_point;
}

// EvalPlus's check of one answer (unsafe_execute's loop body), on what plus_program's runs
// returned: exact (==, or the oracle's own comparison), else, where there is a tolerance, the
// same type and np.allclose(out, exp, rtol=1e-7, atol). `atol` is the run's, as EvalPlus's loop
// variable: once an expected answer is_floats it is 1e-6 (if the problem gives 0) for the rest of
// the run; base inputs and plus inputs are two runs. An int answer where a float is expected
// fails unless equal. A NaN is never equal, nor close: EvalPlus compares the candidate's answer
// with the reference's, made apart, and Python's `nan == nan` is False; a list's `==` is True for
// one NaN object on both sides, which only `math.nan` in both could be (not modelled here).
bool plus_answer_passes(const CodeProblem& p, const Value& got, const Value& exp, double& atol) {
  auto pair = [](const Value& v) { return v.kind() == ValueKind::Tuple && v.items().size() == 2; };
  auto is_true = [](const Value& v) { return v.kind() == ValueKind::Bool && v.as_bool(); };
  const Value* out = &got;
  const Value* want = &exp;
  bool exact = false;
  switch (p.oracle) {
    case PlusOracle::Equal: exact = sandbox::python_equal(got, exp); break;
    case PlusOracle::SetEqual:  // both returned ({*out}, out or None): an iterator is used up, and
                                // the tolerance needs a list, a tuple or a float anyway
      if (!pair(got) || !pair(exp)) return false;
      exact = sandbox::python_equal(got.items()[0], exp.items()[0]);
      out = &got.items()[1];
      want = &exp.items()[1];
      break;
    case PlusOracle::NotNone: return sandbox::python_equal(got, exp);  // a bool is expected: no tolerance
    case PlusOracle::FindZero: return is_true(got);  // EvalPlus goes on to the next input here
    case PlusOracle::OrReference:  // the candidate returned (out, whether the second reference takes it)
      if (!pair(got)) return false;
      out = &got.items()[0];
      exact = is_true(got.items()[1]) || sandbox::python_equal(*out, exp);
      break;
  }
  if (atol == 0 && is_floats(*want)) atol = 1e-6;
  if (exact || atol == 0) return exact;
  return out->kind() == want->kind() && all_close(*out, *want, atol);
}

constexpr const char* kCheckEntry = "__azr_check__";

// What `__name__` reads as in a candidate under EvalPlus and human-eval, which exec(code, {}):
// the name falls through to the builtins module's. A `__main__` block (a demo, doctest.testmod(),
// input()) stays off, where a script's name ran it and failed correct solutions.
constexpr const char* kEvalPlusModuleName = "builtins";

std::string base_test_program(const std::string& candidate, const CodeProblem& p) {
  // The test source runs inside the checker so a failing assert is reported as the call's
  // exception; it sees the candidate's module namespace (exec with globals()).
  return candidate + "\n\n\ndef " + kCheckEntry + "():\n    exec(" + python_str_literal(p.test) +
         ", globals())\n    return True\n";
}

sandbox::Limits plus_limits(const sandbox::Limits& base, double cpu) {
  sandbox::Limits l = base;
  l.cpu_seconds = cpu;
  l.wall_seconds = 0;
  if (l.memory_bytes < (2ull << 30)) l.memory_bytes = 2ull << 30;
  if (l.max_result_bytes < (128ull << 20)) l.max_result_bytes = 128ull << 20;
  if (l.max_output_bytes < (1ull << 20)) l.max_output_bytes = 1ull << 20;
  return l;
}

}  // namespace

std::string json_to_python(std::string_view json) {
  JsonCursor c{json};
  std::string out;
  c.value_to_python(out, nullptr);
  c.ws();
  if (c.i != json.size()) c.fail("trailing characters");
  return out;
}

std::vector<std::string> code_bench_preimports() {
  // The sandbox's default allowlist plus hashlib (HumanEval/162 hashes with md5) and the rest of
  // the pure-computation standard library solutions import, as under EvalPlus's plain Python: a
  // child cannot load a module from disk, so one left out fails a correct solution with
  // ModuleNotFoundError (MBPP/397 with statistics.median). Training keeps the lean list (its
  // cost is in every fork of the self-play step); a benchmark pool pays it once per evaluation.
  std::vector<std::string> mods = sandbox::default_preimports();
  for (const char* m : {"hashlib", "statistics", "datetime", "calendar", "json", "textwrap", "dataclasses", "pprint",
                        "difflib", "base64", "string", "itertools", "queue", "doctest", "unittest"})
    if (std::find(mods.begin(), mods.end(), m) == mods.end()) mods.push_back(m);
  return mods;
}

std::vector<CodeProblem> load_code_benchmark(const std::string& name, const std::filesystem::path& data_dir) {
  std::filesystem::path file;
  if (name == "humaneval") file = data_dir / "humaneval" / "HumanEval.jsonl.gz";
  else if (name == "humanevalplus") file = data_dir / "humanevalplus" / "HumanEvalPlus-v0.1.10.jsonl.gz";
  else if (name == "mbpp") file = data_dir / "mbpp" / "mbpp.jsonl";
  else if (name == "mbppplus") file = data_dir / "mbppplus" / "MbppPlus-v0.2.0.jsonl.gz";
  else throw std::runtime_error("unknown code benchmark '" + name + "' (humaneval, humanevalplus, mbpp, mbppplus)");
  auto lines = read_lines(file);
  std::vector<CodeProblem> out;
  for (size_t n = 0; n < lines.size(); ++n) {
    if (lines[n].empty()) continue;
    try {
      if (name == "mbpp") {
        auto j = nlohmann::json::parse(lines[n]);
        int id = j.at("task_id").get<int>();
        if (id < 11 || id > 510) continue;
      }
      out.push_back(parse_item(name, lines[n]));
    } catch (const std::exception& e) {
      throw std::runtime_error(file.string() + ":" + std::to_string(n + 1) + ": " + e.what());
    }
  }
  if (out.empty()) throw std::runtime_error(file.string() + ": no items");
  return out;
}

namespace {

// FNV-1a over the canonical program, the plus inputs and the output caps, each string
// length-prefixed so that no two different lists hash the same bytes.
uint64_t canonical_fingerprint(const CodeProblem& p, const sandbox::Limits& ran_under) {
  uint64_t h = 1469598103934665603ull;
  auto add_u64 = [&](uint64_t v) {
    for (size_t i = 0; i < sizeof v; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  auto add = [&](std::string_view s) {
    add_u64(s.size());
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  add(p.canonical_solution);
  add(p.entry_point);
  add_u64(static_cast<uint64_t>(p.oracle));
  add_u64(std::bit_cast<uint64_t>(p.atol));
  for (const std::string& in : p.plus_inputs) add(in);
  add_u64(ran_under.max_result_bytes);
  add_u64(ran_under.max_output_bytes);
  return h;
}

}  // namespace

sandbox::Limits canonical_run_limits(const sandbox::Limits& limits) {
  return plus_limits(limits, std::max(60.0, limits.cpu_seconds));
}

const sandbox::JobResult* CanonicalResults::find(const CodeProblem& p, const sandbox::Limits& ran_under) const {
  auto it = by_id_.find(p.id);
  if (it == by_id_.end() || it->second.fingerprint != canonical_fingerprint(p, ran_under)) return nullptr;
  return &it->second.result;
}

bool CanonicalResults::keep(const CodeProblem& p, const sandbox::Limits& ran_under, const sandbox::JobResult& r) {
  // A returned value, a raised exception or an output over a cap follow from the program, the
  // input and the caps; anything else may be the machine's (a busy machine's timeout, a lost
  // worker) and is asked again next time.
  if (r.calls.size() != p.plus_inputs.size()) return false;
  for (const sandbox::CallResult& c : r.calls)
    if (c.status != Status::Ok && c.status != Status::Error && c.status != Status::OutputLimit) return false;
  by_id_[p.id] = {canonical_fingerprint(p, ran_under), r};
  return true;
}

namespace {

bool same_problem(const CodeProblem& a, const CodeProblem& b) {
  return a.id == b.id && a.entry_point == b.entry_point && a.test == b.test && a.plus_inputs == b.plus_inputs &&
         a.base_inputs == b.base_inputs &&
         a.canonical_solution == b.canonical_solution && a.atol == b.atol && a.oracle == b.oracle;
}

// EvalPlus's time limit on one input: max(1 s, 4x the reference's time on it) (its
// min_time_limit and gt_time_limit_factor). Here both times are the calls' CPU seconds in the
// sandbox, which load on the machine does not stretch as it does EvalPlus's wall clock.
constexpr double kPlusMinSeconds = 1.0, kPlusTimeFactor = 4.0;
// EvalPlus's cap on a whole input set (untrusted_check): min(60 s, the inputs' limits summed) + 1 s.
constexpr double kPlusSetCapSeconds = 60.0, kPlusSetCapSlack = 1.0;

// Input k's own limit, from the canonical solution's CPU time on it.
double plus_input_limit(const sandbox::CallResult& canonical) {
  return std::max(kPlusMinSeconds, kPlusTimeFactor * canonical.cpu_seconds);
}

// The verdict on a run of plus_inputs[from, to) (r) against the canonical run of them all (c).
// atol: the input set's tolerance so far (plus_answer_passes sets it at the first float, for the
// rest of the set, as EvalPlus's unsafe_execute does; a continued set keeps it).
CodeVerdict judge_plus_inputs(const CodeProblem& p, const sandbox::JobResult& r, const sandbox::JobResult& c,
                              size_t from, size_t to, double& atol) {
  for (size_t k = from; k < to; ++k) {
    const sandbox::CallResult* got = k - from < r.calls.size() ? &r.calls[k - from] : nullptr;
    const sandbox::CallResult* exp = k < c.calls.size() ? &c.calls[k] : nullptr;
    const std::string where = "plus input " + std::to_string(k);
    if (!exp || exp->status == Status::Internal || !got || got->status == Status::Internal)
      return {false, "internal_error", where + ": sandbox failure"};
    // Each input has EvalPlus's limit, whatever the call returned.
    const double limit = plus_input_limit(*exp);
    if (got->cpu_seconds > limit)
      return {false, "timeout",
              where + " (" + clip(p.plus_inputs[k], 200) + "): " + std::to_string(got->cpu_seconds) +
                  " CPU-seconds, over its limit of " + std::to_string(limit) + " (max(1 s, 4x the reference's " +
                  std::to_string(exp->cpu_seconds) + " s))"};
    if (exp->status != Status::Ok) {
      // The canonical solution itself fails here: the candidate must fail the same way.
      if (got->status == exp->status && got->error_type == exp->error_type) continue;
      return {false, "wrong_output",
              where + " (" + clip(p.plus_inputs[k], 200) + "): canonical raised " + exp->error_type};
    }
    if (got->status != Status::Ok) {
      CodeVerdict v = verdict_of_failure(*got, r.output);
      v.detail = where + " (" + clip(p.plus_inputs[k], 200) + "): " + v.detail;
      return v;
    }
    if (!plus_answer_passes(p, *got->value, *exp->value, atol))
      return {false, "wrong_output",
              where + " (" + clip(p.plus_inputs[k], 200) + "): expected " + clip(exp->repr, 200) + ", got " +
                  clip(got->repr, 200)};
  }
  return {true, "ok", ""};
}

}  // namespace

std::vector<CodeVerdict> grade_code(sandbox::Pool& pool, const std::vector<CodeProblem>& problems,
                                    const std::vector<std::string>& completions, const sandbox::Limits& limits,
                                    CanonicalResults* kept, bool share_identical) {
  if (problems.size() != completions.size())
    throw std::invalid_argument("grade_code: problems and completions differ in size");
  const size_t n = problems.size();
  std::vector<CodeVerdict> verdicts(n);

  // Stage 0: which candidates run. leader[i] is i, or an earlier candidate that is the same
  // program for the same problem, whose verdict i takes at the end.
  std::vector<size_t> leader(n);
  std::unordered_map<sandbox::WorkKey, size_t, sandbox::WorkKeyHash> first_of;  // (problem id, program)
  for (size_t i = 0; i < n; ++i) {
    leader[i] = i;
    if (!share_identical) continue;
    auto [it, fresh] = first_of.try_emplace(sandbox::WorkKey{problems[i].id, completions[i]}, i);
    if (!fresh && same_problem(problems[it->second], problems[i])) leader[i] = it->second;
  }

  // Stage 1: base tests for every candidate. The canonical outputs on the plus inputs (one job
  // per distinct problem id) are computed only once some candidate of that problem passes its
  // base tests: most failing candidates never need them, and they are most of the work.
  std::unordered_map<uint64_t, size_t> base_job;            // job id -> candidate index
  std::unordered_map<uint64_t, size_t> canon_job;           // job id -> index of a problem with that id
  const sandbox::Limits canonical_limits = canonical_run_limits(limits);
  std::unordered_map<std::string, sandbox::JobResult> computed;  // problem id -> canonical result run here, not kept
  std::unordered_map<std::string, bool> canon_submitted;
  // Problem i's canonical result: run by this call, or kept (by this call or an earlier one);
  // nullptr if neither.
  auto canonical_of = [&](size_t i) -> const sandbox::JobResult* {
    if (auto it = computed.find(problems[i].id); it != computed.end()) return &it->second;
    return kept ? kept->find(problems[i], canonical_limits) : nullptr;
  };
  for (size_t i = 0; i < n; ++i) {
    if (leader[i] != i) continue;
    sandbox::Job job;
    job.program = base_test_program(completions[i], problems[i]);
    job.entry = kCheckEntry;
    job.module_name = kEvalPlusModuleName;
    job.inputs = {""};
    job.limits = limits;
    base_job[pool.submit(std::move(job))] = i;
  }
  std::vector<bool> base_ok(n, false);
  size_t outstanding = base_job.size();
  auto submit_canon = [&](size_t i) {
    const CodeProblem& p = problems[i];
    if (canon_submitted[p.id]) return;
    canon_submitted[p.id] = true;
    sandbox::Job cj;
    cj.program = plus_program(p, p.canonical_solution, true);
    cj.entry = plus_entry(p, true);
    cj.module_name = kEvalPlusModuleName;
    cj.inputs = p.plus_inputs;
    cj.limits = canonical_limits;
    canon_job[pool.submit(std::move(cj))] = i;
    ++outstanding;
  };
  // A candidate's inputs run as EvalPlus's two input sets, two verdicts: the base inputs, then, if
  // it passed them all, the plus inputs. Most failing candidates fail a base input, and the plus
  // inputs are most of the work (MBPP+: 58 CPU-seconds of canonical runs).
  //
  // Each input has its own limit (plus_input_limit), and the set EvalPlus's cap. A job runs the
  // set's inputs from `from` on, with limits.cpu_seconds (the program's start-up) + the larger of
  // input `from`'s limit and 4x the canonical solution's time on all of them; a job that runs out
  // of time in a later input is continued from that input by a new job, until the set's cap. So a
  // loop that never returns is stopped within two jobs' budgets (the one it started in, then one
  // of its own: the start-up + its limit), where one job's budget stopped it before; and a
  // candidate a little slow on many inputs passes, as it does there.
  struct PlusPart {
    size_t candidate, from, to;  // this job: plus_inputs[from, to)
    size_t set_from;             // the input set it belongs to: plus_inputs[set_from, to)
    double spent;                // CPU-seconds of the set's inputs judged so far (earlier jobs)
    double atol;                 // the set's tolerance so far (judge_plus_inputs)
  };
  std::unordered_map<uint64_t, PlusPart> plus_job;
  std::vector<size_t> waiting_for_canon;
  auto submit_plus = [&](const PlusPart& part) {
    const auto& p = problems[part.candidate];
    const sandbox::JobResult& c = *canonical_of(part.candidate);
    sandbox::Job job;
    job.program = plus_program(p, completions[part.candidate], false);
    job.entry = plus_entry(p, false);
    job.module_name = kEvalPlusModuleName;
    job.inputs.assign(p.plus_inputs.begin() + static_cast<std::ptrdiff_t>(part.from),
                      p.plus_inputs.begin() + static_cast<std::ptrdiff_t>(part.to));
    double canonical_time = 0;
    for (size_t k = part.from; k < part.to && k < c.calls.size(); ++k) canonical_time += c.calls[k].cpu_seconds;
    const double first_limit = part.from < c.calls.size() ? plus_input_limit(c.calls[part.from]) : kPlusMinSeconds;
    job.limits = plus_limits(limits, limits.cpu_seconds + std::max(first_limit, kPlusTimeFactor * canonical_time));
    plus_job[pool.submit(std::move(job))] = part;
    ++outstanding;
  };
  auto submit_base_inputs = [&](size_t i) {
    const size_t base = std::min(problems[i].base_inputs, problems[i].plus_inputs.size());
    const size_t to = base > 0 ? base : problems[i].plus_inputs.size();
    submit_plus({i, 0, to, 0, 0.0, problems[i].atol});
  };
  // The verdict on a job of an input set, or nullopt where a job continuing it was submitted.
  auto judge_plus_job = [&](const PlusPart& part, const sandbox::JobResult& r) -> std::optional<CodeVerdict> {
    const auto& p = problems[part.candidate];
    const sandbox::JobResult& c = *canonical_of(part.candidate);
    // The inputs the job finished before it ran out of time: a call without a record takes the
    // child's fate, here a timeout; a recorded call is never one.
    size_t done = 0;
    while (done < r.calls.size() && r.calls[done].status != Status::Timeout) ++done;
    const bool ran_out = done < r.calls.size();
    const size_t stopped_at = part.from + done;  // the input running when time ran out
    double atol = part.atol;
    CodeVerdict v = judge_plus_inputs(p, r, c, part.from, ran_out ? stopped_at : part.to, atol);
    if (!v.passed) return v;
    // The set's time as EvalPlus counts it, where it runs the program once: the inputs' calls, and
    // the start-up and input parsing of the job that finished the set. A job that ran out is
    // charged its finished calls alone: the input it was in runs again, whole, in the next one.
    double spent = part.spent;
    for (size_t k = 0; k < done; ++k) spent += r.calls[k].cpu_seconds;
    if (!ran_out) spent = part.spent + r.cpu_seconds;
    double cap = 0;
    for (size_t k = part.set_from; k < part.to && k < c.calls.size(); ++k) cap += plus_input_limit(c.calls[k]);
    cap = std::min(kPlusSetCapSeconds, cap) + kPlusSetCapSlack;
    const std::string input = "plus input " + std::to_string(stopped_at) + " (" +
                              clip(ran_out ? p.plus_inputs[stopped_at] : std::string(), 200) + "): ";
    if (ran_out && done == 0) {
      // It had its whole limit (and the start-up's) to itself, on the CPU clock; a wall-clock kill
      // (a loaded machine) says so instead.
      if (r.calls[0].error_type != "CpuTimeout") {
        CodeVerdict w = verdict_of_failure(r.calls[0], r.output);
        w.detail = input + w.detail;
        return w;
      }
      const double limit = stopped_at < c.calls.size() ? plus_input_limit(c.calls[stopped_at]) : kPlusMinSeconds;
      return CodeVerdict{false, "timeout",
                         input + "over its limit of " + std::to_string(limit) +
                             " CPU-seconds (stopped, still running)"};
    }
    if (spent > cap)
      return CodeVerdict{false, "timeout",
                         "plus inputs " + std::to_string(part.set_from) + " to " + std::to_string(part.to - 1) + ": " +
                             std::to_string(spent) + " CPU-seconds in all, over EvalPlus's cap on the set of " +
                             std::to_string(cap) + " (min(60 s, their limits summed) + 1 s)"};
    if (ran_out) {
      submit_plus({part.candidate, stopped_at, part.to, part.set_from, spent, atol});
      return std::nullopt;
    }
    return v;
  };
  while (outstanding > 0) {
    sandbox::JobResult r = pool.wait_any();
    --outstanding;
    if (auto it = base_job.find(r.id); it != base_job.end()) {
      size_t i = it->second;
      const auto& c = r.calls.empty() ? sandbox::CallResult{} : r.calls[0];
      bool ok = c.status == Status::Ok && c.value && c.value->kind() == ValueKind::Bool && c.value->as_bool();
      if (!ok) {
        verdicts[i] = verdict_of_failure(c, r.output);
        continue;
      }
      base_ok[i] = true;
      if (problems[i].plus_inputs.empty()) {
        verdicts[i] = {true, "ok", ""};
      } else if (canonical_of(i)) {
        submit_base_inputs(i);
      } else {
        waiting_for_canon.push_back(i);
        submit_canon(i);
      }
    } else if (auto ct = canon_job.find(r.id); ct != canon_job.end()) {
      const std::string pid = problems[ct->second].id;
      // Held once: by `kept` where it takes the result, else here.
      if (!kept || !kept->keep(problems[ct->second], canonical_limits, r)) computed[pid] = std::move(r);
      std::vector<size_t> still;
      for (size_t i : waiting_for_canon) {
        if (problems[i].id == pid) submit_base_inputs(i);
        else still.push_back(i);
      }
      waiting_for_canon.swap(still);
    } else if (auto pt = plus_job.find(r.id); pt != plus_job.end()) {
      const PlusPart part = pt->second;
      plus_job.erase(pt);
      std::optional<CodeVerdict> v = judge_plus_job(part, r);
      if (!v) continue;  // continued by a new job
      const size_t n_inputs = problems[part.candidate].plus_inputs.size();
      if (v->passed && part.to < n_inputs)
        submit_plus({part.candidate, part.to, n_inputs, part.to, 0.0, problems[part.candidate].atol});
      else verdicts[part.candidate] = std::move(*v);
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (leader[i] != i) verdicts[i] = verdicts[leader[i]];
  return verdicts;
}

std::string extract_code(std::string_view response, const CodeProblem& p) {
  // The last fenced Python block (```python / ```py / ```Python3 / bare ```, the tag in any
  // case) that defines the entry point, else the last Python block: a response often ends with
  // a block that only calls the function (`print(f(...))`), which alone fails every test.
  std::string_view code = response;
  size_t pos = 0;
  std::string_view last, last_defining;
  bool found = false, found_defining = false;
  const std::string def = "def " + p.entry_point + "(";
  while (true) {
    size_t open = response.find("```", pos);
    if (open == std::string_view::npos) break;
    size_t line_end = response.find('\n', open);
    if (line_end == std::string_view::npos) break;
    std::string_view lang = response.substr(open + 3, line_end - open - 3);
    while (!lang.empty() && (lang.back() == ' ' || lang.back() == '\r')) lang.remove_suffix(1);
    std::string tag(lang);
    for (char& ch : tag) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    const bool ok_lang = tag.empty() || tag == "python" || tag == "py" || tag == "python3";
    size_t close = response.find("```", line_end + 1);
    std::string_view body = close == std::string_view::npos ? response.substr(line_end + 1)
                                                              : response.substr(line_end + 1, close - line_end - 1);
    if (ok_lang) {
      last = body;
      found = true;
      if (!p.entry_point.empty() && body.find(def) != std::string_view::npos) {
        last_defining = body;
        found_defining = true;
      }
    }
    if (close == std::string_view::npos) break;
    pos = close + 3;
  }
  if (found) code = found_defining ? last_defining : last;
  std::string out(code);
  bool humaneval = p.id.rfind("HumanEval/", 0) == 0;
  if (humaneval && out.find("def " + p.entry_point) == std::string::npos) out = p.prompt + out;
  return out;
}

}  // namespace azr::eval
