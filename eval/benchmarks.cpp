#include "eval/benchmarks.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "eval/math_answer.h"
#include "model/json_text.h"

namespace azr::eval {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string json_string(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// A benchmark file's object, with the place a message about it names ("FILE:LINE": blank lines
// are skipped, so an item's index is not its line).
struct Row {
  json j;
  std::string where;
};

std::vector<Row> read_jsonl(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BenchmarkError(path.string() + ": cannot open the benchmark file");
  std::error_code ec;  // a directory opens as a stream and reads as empty
  if (!fs::is_regular_file(path, ec)) throw BenchmarkError(path.string() + ": not a file");
  std::vector<Row> out;
  std::string line;
  for (size_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back({json::parse(line), path.string() + ":" + std::to_string(lineno)});
    } catch (const json::exception& e) {  // a syntax error, or a number past a double (out_of_range)
      throw BenchmarkError(path.string() + ":" + std::to_string(lineno) + ": not valid JSON (" +
                           model::json_error_text(e) + ")");
    }
    if (!out.back().j.is_object())
      throw BenchmarkError(path.string() + ":" + std::to_string(lineno) + ": expected a JSON object");
  }
  return out;
}

void load_cruxeval(Benchmark& b, const fs::path& dir) {
  fs::path path = dir / "cruxeval.jsonl";
  for (const auto& [r, where] : read_jsonl(path)) {
    for (const char* f : {"code", "input", "output", "id"})
      if (!r.contains(f) || !r[f].is_string())
        throw BenchmarkError(where + ": field '" + f + "' missing or not a string");
    BenchItem it;
    it.id = r["id"].get<std::string>();
    it.program = r["code"].get<std::string>();
    it.input = r["input"].get<std::string>();
    it.output = r["output"].get<std::string>();
    it.prompt = it.program;
    it.gold = b.info.name == "cruxeval_o" ? it.output : it.input;
    b.items.push_back(std::move(it));
  }
}

void load_math(Benchmark& b, const fs::path& dir) {
  fs::path path = dir / "test.jsonl";
  const std::vector<Row> rows = read_jsonl(path);
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i].j;
    BenchItem it;
    it.id = std::to_string(i);  // gsm8k has no id: its line index
    for (const char* f : {"id", "unique_id", "idx"})
      if (r.contains(f) && !r[f].is_null()) {
        it.id = json_string(r[f]);
        break;
      }
    for (const char* f : {"problem", "question"})
      if (r.contains(f) && r[f].is_string()) {
        it.prompt = r[f].get<std::string>();
        break;
      }
    if (it.prompt.empty())
      throw BenchmarkError(rows[i].where + ": no 'problem' or 'question' text");
    std::optional<std::string> gold = gold_math_answer(b.info.folder, r);
    if (!gold) throw BenchmarkError(rows[i].where + ": no gold answer");
    // An empty gold ("answer": "", a solution whose last \boxed{} is empty) would grade every
    // answer wrong without a word; a data file like that is broken, not hard.
    if (gold->find_first_not_of(" \t\r\n") == std::string::npos)
      throw BenchmarkError(rows[i].where + ": the gold answer is empty");
    it.gold = *gold;
    b.items.push_back(std::move(it));
  }
}

void load_code(Benchmark& b, const fs::path& data_dir) {
  try {
    b.code = load_code_benchmark(b.info.name, data_dir);
  } catch (const std::runtime_error& e) {
    throw BenchmarkError(e.what());
  }
  for (size_t i = 0; i < b.code.size(); ++i) {
    BenchItem it;
    it.id = b.code[i].id;
    it.prompt = b.code[i].prompt;
    it.gold = b.code[i].canonical_solution;
    it.code_index = i;
    b.items.push_back(std::move(it));
  }
  b.canonical = std::make_shared<CanonicalResults>();
}

}  // namespace

const char* category_name(Category c) {
  switch (c) {
    case Category::Code: return "code";
    case Category::Math: return "math";
    case Category::Gsm8k: return "gsm8k";
    case Category::Cruxeval: return "cruxeval";
  }
  return "?";
}

const std::vector<BenchmarkInfo>& benchmark_registry() {
  static const std::vector<BenchmarkInfo> r = {
      {"humanevalplus", Category::Code, "humanevalplus"},
      {"mbppplus", Category::Code, "mbppplus"},
      {"humaneval", Category::Code, "humaneval", /*in_average=*/false},
      {"mbpp", Category::Code, "mbpp", /*in_average=*/false},
      {"aime24", Category::Math, "aime24"},
      {"aime25", Category::Math, "aime25"},
      {"amc23", Category::Math, "amc23"},
      {"math500", Category::Math, "math500"},
      {"minerva_math", Category::Math, "minerva_math"},
      {"olympiadbench", Category::Math, "olympiadbench"},
      {"gsm8k", Category::Gsm8k, "gsm8k"},
      {"cruxeval_o", Category::Cruxeval, "cruxeval"},
      {"cruxeval_i", Category::Cruxeval, "cruxeval"},
  };
  return r;
}

std::string benchmark_names() {
  std::string names;
  for (const auto& b : benchmark_registry()) names += (names.empty() ? "" : ", ") + b.name;
  return names;
}

const BenchmarkInfo* find_benchmark(std::string_view name) {
  for (const auto& b : benchmark_registry())
    if (b.name == name) return &b;
  return nullptr;
}

std::optional<size_t> Benchmark::index_of(const std::string& id) const {
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].id == id) return i;
  return std::nullopt;
}

Benchmark load_benchmark(std::string_view name, const fs::path& data_dir) {
  const BenchmarkInfo* info = find_benchmark(name);
  if (!info) throw BenchmarkError("unknown benchmark '" + std::string(name) + "'");
  Benchmark b;
  b.info = *info;
  switch (info->category) {
    case Category::Cruxeval: load_cruxeval(b, data_dir / info->folder); break;
    case Category::Math:
    case Category::Gsm8k: load_math(b, data_dir / info->folder); break;
    case Category::Code: load_code(b, data_dir); break;
  }
  // An empty file would score 0 of 0 and pass for a run that evaluated something.
  if (b.items.empty())
    throw BenchmarkError(std::string(name) + " (in " + (data_dir / info->folder).string() + "): no items");
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < b.items.size(); ++i)
    if (!seen.emplace(b.items[i].id, i).second)
      throw BenchmarkError(std::string(name) + " (in " + (data_dir / info->folder).string() + "): duplicate item id '" +
                           b.items[i].id + "' (items " + std::to_string(seen[b.items[i].id] + 1) + " and " +
                           std::to_string(i + 1) + ")");
  return b;
}

fs::path resolve_data_dir(const std::string& flag) {
  fs::path dir;
  if (!flag.empty()) {
    dir = flag;
  } else if (const char* env = std::getenv("AZR_BENCHMARKS"); env && *env) {
    dir = env;
  } else if (fs::is_directory("../shared/benchmarks")) {
    dir = "../shared/benchmarks";
  } else {
    // Says where it looked: ../shared/benchmarks is relative to the working directory, so the same
    // command finds the data in the repository and not from elsewhere. `azr eval` takes --data,
    // a run config eval.data_dir (whose caller adds that).
    throw BenchmarkError("no benchmark data: AZR_BENCHMARKS is unset and " +
                         (fs::current_path() / "../shared/benchmarks").lexically_normal().string() +
                         " is not a directory; give the folder of the benchmarks' README.md (azr eval --data DIR, or "
                         "AZR_BENCHMARKS)");
  }
  if (std::error_code ec; !fs::is_directory(dir, ec))
    throw BenchmarkError(dir.string() + ": " + (fs::exists(dir, ec) ? "not a directory" : "no such directory") +
                         " (the benchmark data dir" + (flag.empty() ? ", from $AZR_BENCHMARKS" : "") + ")");
  return dir;
}

std::string gold_response(const Benchmark& b, const BenchItem& it) {
  switch (b.info.category) {
    case Category::Cruxeval: return it.gold;
    case Category::Code: return "Here it is:\n```python\n" + it.gold + "\n```\n";
    default: return "So the answer is \\boxed{" + it.gold + "}.";
  }
}

}  // namespace azr::eval
