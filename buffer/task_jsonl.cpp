#include "buffer/task_jsonl.h"

#include <array>
#include <istream>
#include <ostream>
#include <set>
#include <stdexcept>

#include "buffer/sqlite_util.h"
#include "buffer/task_row.h"
#include "model/json_text.h"

namespace azr::buffer {
namespace {

const nlohmann::json& field(const nlohmann::json& j, const char* name) {
  if (!j.contains(name)) throw std::invalid_argument(std::string("field '") + name + "' is missing");
  return j[name];
}

std::string string_field(const nlohmann::json& j, const char* name) {
  const auto& v = field(j, name);
  if (!v.is_string()) throw std::invalid_argument(std::string("field '") + name + "' must be a string");
  return v.get<std::string>();
}

std::vector<std::string> string_list(const nlohmann::json& j, const char* name) {
  const auto& v = field(j, name);
  if (!v.is_array()) throw std::invalid_argument(std::string("field '") + name + "' must be an array of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      throw std::invalid_argument(std::string("field '") + name + "'[" + std::to_string(i) + "] must be a string");
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

}  // namespace

nlohmann::ordered_json task_to_json(const Task& t, bool core_only) {
  nlohmann::ordered_json j;
  j["type"] = type_name(t.type);
  j["program"] = t.program;
  if (t.type == TaskType::Induction) {
    j["inputs"] = t.inputs;
    j["outputs"] = t.outputs;
    j["message"] = t.message;
  } else {
    j["input"] = t.input;
    j["output"] = t.output;
  }
  if (core_only) return j;
  j["id"] = t.id;
  j["origin"] = origin_name(t.origin);
  j["step"] = t.step;
  j["proposer_sample"] = t.proposer_sample;
  j["attempts"] = t.attempts;
  j["successes"] = t.successes;
  j["learnability"] = t.learnability ? nlohmann::ordered_json(*t.learnability) : nlohmann::ordered_json(nullptr);
  j["times_referenced"] = t.times_referenced;
  j["times_served"] = t.times_served;
  return j;
}

Task task_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("expected a JSON object");
  Task t;
  std::string type = string_field(j, "type");
  auto parsed = parse_type(type);
  if (!parsed)
    throw std::invalid_argument("field 'type' must be \"deduction\", \"abduction\" or \"induction\", not \"" + type +
                                "\"");
  t.type = *parsed;
  t.origin = Origin::Imported;
  t.program = string_field(j, "program");
  if (t.program.find_first_not_of(" \t\r\n") == std::string::npos)
    throw std::invalid_argument("field 'program' is empty");
  if (t.type == TaskType::Induction) {
    t.inputs = string_list(j, "inputs");
    t.outputs = string_list(j, "outputs");
    t.message = string_field(j, "message");
    if (t.inputs.size() != t.outputs.size())
      throw std::invalid_argument("fields 'inputs' and 'outputs' must have the same length (" +
                                  std::to_string(t.inputs.size()) + " vs " + std::to_string(t.outputs.size()) + ")");
    if (t.inputs.empty()) throw std::invalid_argument("field 'inputs' is empty");
  } else {
    t.input = string_field(j, "input");
    t.output = string_field(j, "output");
  }
  if (j.contains("step")) {
    const auto& s = j["step"];
    if (!s.is_number_integer() || s.get<int64_t>() < 0)
      throw std::invalid_argument("field 'step' must be a non-negative integer");
    t.step = s.get<int64_t>();
  }
  return t;
}

namespace {

// Every field task_to_json writes for a task of `type` (the type's, then an export's): read off
// the writer itself, once, so a field it gains is never reported as ignored.
bool known_field(TaskType type, const std::string& key) {
  static const std::array<std::set<std::string, std::less<>>, 3> fields = [] {
    std::array<std::set<std::string, std::less<>>, 3> f;
    for (TaskType t : {TaskType::Deduction, TaskType::Abduction, TaskType::Induction}) {
      Task empty;
      empty.type = t;
      const nlohmann::ordered_json written = task_to_json(empty, false);
      for (auto it = written.begin(); it != written.end(); ++it) f[static_cast<size_t>(t)].insert(it.key());
    }
    return f;
  }();
  return fields[static_cast<size_t>(type)].count(key) > 0;
}

}  // namespace

std::string ignored_fields_text(const ImportReport& rep) {
  std::string out;
  for (const auto& [field, lines] : rep.ignored_fields) {
    const std::string quoted = nlohmann::json(field).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out += (out.empty() ? "" : ", ") + quoted + " (" + std::to_string(lines) + (lines == 1 ? " line)" : " lines)");
  }
  if (rep.ignored_other_lines > 0)
    out += ", and others in " + std::to_string(rep.ignored_other_lines) + " line(s)";
  return out;
}

std::string listed_errors(const ImportReport& rep) {
  std::string out;
  for (const std::string& e : rep.errors) out += "\n  " + e;
  if (rep.invalid > int64_t(rep.errors.size()))
    out += "\n  ... and " + std::to_string(rep.invalid - int64_t(rep.errors.size())) + " more";
  return out;
}

ImportReport read_jsonl(std::istream& in, const std::string& name, bool skip_invalid, std::vector<Task>& tasks,
                        std::string_view hint) {
  ImportReport rep;
  // Every bad line counted, the first kMaxListedErrors kept: a binary file given by mistake (a
  // database) has millions of "lines", and a message each held 7 GB for a 1 GB file.
  auto bad_line = [&](std::string message) {
    if (rep.errors.size() < kMaxListedErrors) rep.errors.push_back(std::move(message));
    ++rep.invalid;
  };
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    // JSON text holds no raw NUL byte: the file is binary (a database given for its export), and
    // reading on took minutes (a 1 GB buffer.db: 31 million "lines", 310 s) to say so. With
    // skip_invalid such a line is one more bad line: a file with a zero-filled tail (a crash) is
    // salvaged.
    if (!skip_invalid && line.find('\0') != std::string::npos) {
      const bool utf16 = line.starts_with("\xff\xfe") || line.starts_with("\xfe\xff") ||
                         (line.size() >= 4 && line[0] != '\0' && line[1] == '\0' && line[3] == '\0');
      throw BufferError(
          name + ":" + std::to_string(lineno) + ": a NUL byte: a binary file, not JSON Lines" +
          (line.starts_with("SQLite format 3")
               ? " (an SQLite database: `azr buffer export DB` writes a buffer's tasks as JSON Lines)"
           : utf16 ? " (UTF-16 text? JSON Lines is UTF-8)"
                   : ""));
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++rep.lines;
    std::string where = name + ":" + std::to_string(lineno) + ": ";
    nlohmann::json j;
    // Bounded as the other commands' JSON Lines readers are (cli/input.h): a task holds strings
    // alone, so a deeper line is no task.
    try {
      j = model::parse_json_bounded(line);
    } catch (const model::JsonTooDeep& e) {
      bad_line(where + e.what());
      continue;
    } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number past a double
      bad_line(where + "not valid JSON (" + model::json_error_text(e) + ")");
      continue;
    }
    try {
      tasks.push_back(task_from_json(j));
      rep.task_lines.push_back(lineno);
      ++rep.valid;
      bool other = false;
      for (const auto& [key, value] : j.items()) {
        if (known_field(tasks.back().type, key)) continue;
        if (auto it = rep.ignored_fields.find(key); it != rep.ignored_fields.end())
          ++it->second;
        else if (rep.ignored_fields.size() < kMaxListedErrors)
          rep.ignored_fields[key] = 1;
        else
          other = true;
      }
      rep.ignored_other_lines += other;
    } catch (const std::invalid_argument& e) {
      bad_line(where + e.what());
    }
  }
  // getline stops quietly on a read error as on end of file; a half-read file must not pass as
  // a short one.
  if (in.bad()) throw BufferError(name + ": read error after " + std::to_string(rep.lines) + " line(s)");
  if (rep.invalid > 0 && !skip_invalid)
    throw BufferError(name + ": " + std::to_string(rep.invalid) + " invalid line(s); nothing imported" +
                      (hint.empty() ? std::string() : " (" + std::string(hint) + ")") + ":" + listed_errors(rep));
  return rep;
}

ImportReport import_jsonl(TaskBuffer& b, std::istream& in, const std::string& name, bool skip_invalid,
                          std::string_view hint) {
  std::vector<Task> tasks;
  ImportReport rep = read_jsonl(in, name, skip_invalid, tasks, hint);
  rep.inserted = b.insert(tasks);
  return rep;
}

int64_t export_jsonl(const TaskBuffer& b, std::ostream& out, const ExportFilter& f) {
  std::string sql = std::string("SELECT ") + kTaskColumns + " FROM tasks";
  if (f.type) sql += " WHERE type = " + std::to_string(static_cast<int>(*f.type));
  sql += " ORDER BY id";
  int64_t n = 0;
  try {
    sql::ReadTransaction snapshot(b.handle());
    sql::Stmt s(b.handle(), sql);
    while (s.step()) {
      out << task_to_json(read_task(s), f.core_only).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
          << '\n';
      ++n;
    }
  } catch (const sql::Error& e) {
    // Lines before the bad page are already written: the caller's exit status tells the rest.
    if (e.code == SQLITE_CORRUPT) throw BufferError(b.path() + ": database file is corrupt (" + e.what() + ")");
    throw BufferError(b.path() + ": " + e.what());
  }
  return n;
}

}  // namespace azr::buffer
