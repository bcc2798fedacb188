#pragma once
// The task interchange format: one JSON object per line.
//   {"type": "deduction"|"abduction", "program": ..., "input": ..., "output": ...}
//   {"type": "induction", "program": ..., "inputs": [...], "outputs": [...], "message": ...}
// Exports add id, origin, step, proposer_sample and the solve statistics after those fields;
// imports accept (and ignore) them, except `step`, which is kept. Imported tasks have origin
// "imported".
#include <iosfwd>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "buffer/task_buffer.h"

namespace azr::buffer {

// Field order as documented above (core fields first), so an export of imported core lines
// reproduces them byte for byte.
nlohmann::ordered_json task_to_json(const Task& t, bool core_only);

// Throws std::invalid_argument("field 'x' ...") naming the first bad field.
Task task_from_json(const nlohmann::json& j);

struct ImportReport {
  int64_t lines = 0;  // non-blank lines read
  int64_t valid = 0;
  int64_t invalid = 0;  // bad lines (skipped, with skip_invalid)
  InsertResult inserted;
  std::vector<std::string> errors;  // "FILE:LINE: problem", the first kMaxListedErrors bad lines
  std::vector<int64_t> task_lines;  // read_jsonl: the line of each task read, in order
  // Fields of valid lines that are not in the format for their task's type (neither the type's
  // fields nor an export's), by name, with the lines that had each: ignored, and said, so that a
  // typo ("stpe") is not lost quietly. The first kMaxListedErrors names are kept; the lines with
  // any other are counted in ignored_other_lines.
  std::map<std::string, int64_t> ignored_fields;
  int64_t ignored_other_lines = 0;
};

// "\"bogus\" (3 lines), \"stpe\" (1 line)" (each name as a JSON string: a key may hold any
// character), then ", and others in N line(s)"; "" when none.
std::string ignored_fields_text(const ImportReport& rep);

// The bad lines an error message lists; the rest are counted.
inline constexpr size_t kMaxListedErrors = 20;

// "\n  FILE:LINE: problem" for each listed bad line, then "\n  ... and N more" if there are more.
std::string listed_errors(const ImportReport& rep);

// Reads every line first. Without skip_invalid, any bad line means nothing is inserted: throws
// BufferError listing the first kMaxListedErrors bad lines and counting the rest (after `hint`,
// the caller's way out, if any: the CLI's flag).
// Valid tasks go in as one transaction.
ImportReport import_jsonl(TaskBuffer& b, std::istream& in, const std::string& name, bool skip_invalid,
                          std::string_view hint = "");
// The reading half of import_jsonl, with no database: fills `tasks` and the report (but not
// `inserted`), throwing as import_jsonl does. The CLI checks the whole input before it opens
// or creates a database.
ImportReport read_jsonl(std::istream& in, const std::string& name, bool skip_invalid, std::vector<Task>& tasks,
                        std::string_view hint = "");

struct ExportFilter {
  std::optional<TaskType> type;
  bool core_only = false;
};
// Tasks in id order (oldest first), one JSON line each; returns the number written.
int64_t export_jsonl(const TaskBuffer& b, std::ostream& out, const ExportFilter& f);

}  // namespace azr::buffer
