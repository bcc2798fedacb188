// azr buffer: inspect and move tasks. Reads open the database read-only, so every command but
// `import` and `migrate` works on a buffer a running trainer is writing.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "buffer/queries.h"
#include "buffer/task_buffer.h"
#include "buffer/task_jsonl.h"
#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/input.h"
#include "cli/output_file.h"
#include "cli/table.h"
#include "trainer/checkpoint.h"
#include "trainer/run_lock.h"

namespace azr::cli {
namespace {

namespace fs = std::filesystem;
using buffer::TaskBuffer;
using nlohmann::ordered_json;

// A buffer's error as the user's (exit 2), naming the database where the error could not (a
// row's: "task 3: ...").
UsageError said_of(const std::string& db, const buffer::BufferError& e) {
  const std::string what = e.what();
  return UsageError(what.starts_with(db + ": ") ? what : db + ": " + what);
}

// Checked whole first (quick_check): a corrupt file is said as such, not answered from.
TaskBuffer open_read(const std::string& db) {
  buffer::Options opts;
  opts.quick_check = true;
  try {
    return TaskBuffer::open(db, TaskBuffer::Mode::ReadOnly, opts);
  } catch (const buffer::BufferError& e) {
    throw UsageError(e.what());
  }
}

std::optional<buffer::TaskType> type_option(const std::string& s) {
  if (s.empty()) return std::nullopt;
  auto t = buffer::parse_type(s);
  if (!t) throw UsageError("--type must be deduction, abduction or induction, not '" + s + "'");
  return t;
}

std::string fixed(double v, int digits = 2) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(digits);
  o << v;
  return o.str();
}

std::string opt_fixed(std::optional<double> v) { return v ? fixed(*v) : "-"; }

std::string solve_rate(const buffer::Task& t) {
  return t.attempts ? fixed(static_cast<double>(t.successes) / static_cast<double>(t.attempts)) : "-";
}

std::string first_line(const std::string& s) {
  size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl) + " ...";
}

std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

ordered_json histogram_json(const buffer::Histogram& h) {
  ordered_json j;
  j["bins"] = h.bins;
  j["missing"] = h.missing;
  return j;
}

std::string histogram_text(const buffer::Histogram& h) {
  std::string s;
  for (size_t i = 0; i < h.bins.size(); ++i) s += (i ? " " : "") + std::to_string(h.bins[i]);
  return s + "  (none: " + std::to_string(h.missing) + ")";
}

// ---- subcommands -----------------------------------------------------------------------------

int run_stats(const BufferOptions& o) {
  TaskBuffer b = open_read(o.db);
  buffer::Stats st = buffer::compute_stats(b);
  if (o.json) {
    ordered_json j;
    j["db"] = o.db;
    j["schema_version"] = st.schema_version;
    for (int t = 0; t < 3; ++t) {
      const auto& ts = st.types[static_cast<size_t>(t)];
      ordered_json x;
      x["total"] = ts.total;
      for (int og = 0; og < 3; ++og) x["by_origin"][buffer::origin_name(static_cast<buffer::Origin>(og))] = ts.by_origin[static_cast<size_t>(og)];
      x["inserted"] = ts.inserted;
      x["duplicates"] = ts.duplicates;
      x["duplicate_rate"] = ts.duplicate_rate();
      x["refused"] = ts.refused;
      x["evicted"] = ts.evicted;
      x["learnability"] = histogram_json(ts.learnability);
      x["solve_rate"] = histogram_json(ts.solve_rate);
      x["growth"] = ordered_json::array();
      for (const auto& g : ts.growth)
        x["growth"].push_back({{"step", g.step}, {"inserted", g.inserted}, {"duplicates", g.duplicates},
                               {"refused", g.refused}, {"evicted", g.evicted}});
      j["types"][buffer::type_name(static_cast<buffer::TaskType>(t))] = x;
    }
    for (const auto& [k, v] : st.meta) j["meta"][k] = v;
    std::cout << dump(j) << '\n';
    return 0;
  }
  std::cout << o.db << " (buffer schema " << st.schema_version << ")\n\n";
  Table counts({"type", "total", "seed", "proposed", "imported", "inserted", "duplicates", "dup rate", "refused",
                "evicted"});
  for (int t = 0; t < 3; ++t) {
    const auto& ts = st.types[static_cast<size_t>(t)];
    counts.add({buffer::type_name(static_cast<buffer::TaskType>(t)), std::to_string(ts.total),
                std::to_string(ts.by_origin[0]), std::to_string(ts.by_origin[1]), std::to_string(ts.by_origin[2]),
                std::to_string(ts.inserted), std::to_string(ts.duplicates), fixed(100 * ts.duplicate_rate(), 1) + "%",
                std::to_string(ts.refused), std::to_string(ts.evicted)});
  }
  counts.print(std::cout);
  std::cout << "\ndistributions, 10 bins over [0, 1]:\n";
  Table dist({"type", "learnability (last estimate)", "solve rate (successes / attempts)"}, 80);
  for (int t = 0; t < 3; ++t) {
    const auto& ts = st.types[static_cast<size_t>(t)];
    dist.add({buffer::type_name(static_cast<buffer::TaskType>(t)), histogram_text(ts.learnability),
              histogram_text(ts.solve_rate)});
  }
  dist.print(std::cout);
  Table growth({"step", "type", "inserted", "duplicates", "refused", "evicted"});
  std::vector<std::pair<int64_t, std::vector<std::string>>> rows;
  for (int t = 0; t < 3; ++t)
    for (const auto& g : st.types[static_cast<size_t>(t)].growth)
      rows.push_back({g.step, {std::to_string(g.step), buffer::type_name(static_cast<buffer::TaskType>(t)),
                               std::to_string(g.inserted), std::to_string(g.duplicates), std::to_string(g.refused),
                               std::to_string(g.evicted)}});
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  constexpr size_t kLastRows = 15;
  size_t from = rows.size() > kLastRows ? rows.size() - kLastRows : 0;
  for (size_t i = from; i < rows.size(); ++i) growth.add(rows[i].second);
  if (!growth.empty()) {
    std::cout << "\ngrowth per step" << (from ? " (last " + std::to_string(kLastRows) + " rows; --json for all)" : "")
              << ":\n";
    growth.print(std::cout);
  }
  if (!st.meta.empty()) {
    std::cout << "\nrun:\n";
    Table meta({"key", "value"}, 100);
    for (const auto& [k, v] : st.meta) meta.add({k, v});
    meta.print(std::cout);
  }
  return 0;
}

buffer::SortKey sort_key(const std::string& s) {
  if (s == "id") return buffer::SortKey::Id;
  if (s == "step") return buffer::SortKey::Step;
  if (s == "learnability") return buffer::SortKey::Learnability;
  if (s == "solve-rate") return buffer::SortKey::SolveRate;
  throw UsageError("--sort must be id, step, learnability or solve-rate, not '" + s + "'");
}

int run_list(const BufferOptions& o) {
  buffer::ListQuery q;
  q.type = type_option(o.type);
  if (!o.origin.empty()) {
    q.origin = buffer::parse_origin(o.origin);
    if (!q.origin) throw UsageError("--origin must be seed, proposed or imported, not '" + o.origin + "'");
  }
  if (!o.steps.empty()) {
    size_t colon = o.steps.find(':');
    if (colon == std::string::npos) throw UsageError("--steps takes A:B (either side may be empty), not '" + o.steps + "'");
    try {
      std::string a = o.steps.substr(0, colon), b = o.steps.substr(colon + 1);
      size_t used = 0;
      if (!a.empty()) q.step_min = std::stoll(a, &used);
      if (!a.empty() && used != a.size()) throw std::invalid_argument("");
      if (!b.empty()) q.step_max = std::stoll(b, &used);
      if (!b.empty() && used != b.size()) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw UsageError("--steps takes integers A:B, not '" + o.steps + "'");
    }
    // Steps count from 0 (the seeds). A negative one read as Python's slice from the end ("-3:",
    // the last three steps) listed every task, as if that were what was asked.
    if ((q.step_min && *q.step_min < 0) || (q.step_max && *q.step_max < 0))
      throw UsageError("--steps " + o.steps + ": steps count from 0 (the seed tasks), not from the end; for the "
                       "newest steps give the first of them (azr buffer stats shows the newest step)");
    // A reversed range selects nothing; say so rather than list no tasks as if there were none.
    if (q.step_min && q.step_max && *q.step_min > *q.step_max)
      throw UsageError("--steps " + o.steps + ": the first step is after the last (A:B is inclusive, A <= B)");
  }
  q.sort = sort_key(o.sort);
  q.descending = o.descending;
  q.limit = o.limit;
  TaskBuffer b = open_read(o.db);
  auto tasks = buffer::list_tasks(b, q);
  if (o.json) {
    for (const auto& t : tasks) std::cout << dump(buffer::task_to_json(t, false)) << '\n';
    return 0;
  }
  Table table({"id", "type", "origin", "step", "attempts", "solve", "learn", "program", "input / inputs"});
  for (const auto& t : tasks)
    table.add({std::to_string(t.id), buffer::type_name(t.type), buffer::origin_name(t.origin), std::to_string(t.step),
               std::to_string(t.attempts), solve_rate(t), opt_fixed(t.learnability), first_line(t.program),
               t.type == buffer::TaskType::Induction ? std::to_string(t.inputs.size()) + " inputs" : t.input});
  table.print(std::cout);
  std::cout << tasks.size() << " task(s)\n";
  return 0;
}

int run_show(const BufferOptions& o) {
  TaskBuffer b = open_read(o.db);
  auto t = b.get(o.id);
  if (!t) throw UsageError(o.db + ": no task with id " + std::to_string(o.id));
  auto history = b.rollouts_for_task(o.id);
  if (o.json) {
    ordered_json j = buffer::task_to_json(*t, false);
    j["rollouts"] = ordered_json::array();
    for (const auto& r : history)
      j["rollouts"].push_back({{"step", r.step}, {"role", r.role}, {"reward", r.reward}, {"correct", r.correct},
                               {"format_ok", r.format_ok}, {"response", r.response}});
    std::cout << dump(j) << '\n';
    return 0;
  }
  std::cout << "task " << t->id << ": " << buffer::type_name(t->type) << ", " << buffer::origin_name(t->origin)
            << ", step " << t->step << (t->proposer_sample.empty() ? "" : ", proposer sample " + t->proposer_sample)
            << "\n\nprogram:\n" << t->program << (t->program.empty() || t->program.back() == '\n' ? "" : "\n");
  if (t->type == buffer::TaskType::Induction) {
    std::cout << "\nmessage: " << t->message << "\n\n";
    Table pairs({"#", "input", "output"}, 70);
    for (size_t i = 0; i < t->inputs.size(); ++i)
      pairs.add({std::to_string(i), t->inputs[i], i < t->outputs.size() ? t->outputs[i] : ""});
    pairs.print(std::cout);
  } else {
    std::cout << "\ninput:  " << t->input << "\noutput: " << t->output << "\n";
  }
  std::cout << "\nattempts " << t->attempts << ", successes " << t->successes << ", solve rate " << solve_rate(*t)
            << ", learnability " << opt_fixed(t->learnability) << ", referenced " << t->times_referenced
            << " times, served " << t->times_served << " times\n";
  if (!history.empty()) {
    std::cout << "\nrollouts:\n";
    Table h({"step", "role", "reward", "correct", "format", "response"}, 60);
    for (const auto& r : history)
      h.add({std::to_string(r.step), r.role, fixed(r.reward), r.correct ? "yes" : "no", r.format_ok ? "ok" : "broken",
             r.response});
    h.print(std::cout);
  }
  return 0;
}

// A database this command must not write: a live run's (the trainer writes it too) and a
// checkpoint's copy (its checksums cover it: --resume would refuse the checkpoint). Found through
// symlinks, where the file is. A stopped run's may be written: --resume keeps it as
// buffer.db.before-resume when it puts the checkpoint's copy in its place, and says so.
void refuse_a_run_buffer(const std::string& db) {
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(db, ec);
  const fs::path dir = parent_dir(ec ? db : resolved.string());
  if (const std::optional<std::string> holder = trainer::run_lock_holder(dir))
    throw UsageError(db + ": the buffer of a live run (" + *holder + "); writing it now would race the trainer. "
                     "Stop the run first (Ctrl-C saves a checkpoint)");
  if (fs::exists(dir / "trainer_state.json", ec))
    throw UsageError(db + ": a checkpoint's copy of its run's buffer; checksums.xxh128 covers it, so --resume would "
                     "refuse a changed one. Copy it elsewhere to change it");
}

// Same file by identity (symlinks, hard links, relative paths) or, where one does not exist yet,
// by resolved name.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec, ec2;
  if (fs::equivalent(a, b, ec)) return true;
  auto ca = fs::weakly_canonical(fs::absolute(a), ec), cb = fs::weakly_canonical(fs::absolute(b), ec2);
  return !ec && !ec2 && ca == cb;
}

// -o is checked before anything is written: the final rename would replace the database (or its
// write-ahead log) with the JSONL text, or fail on a directory after the export did the work.
void check_export_target(const std::string& db, const std::string& output) {
  std::error_code ec;
  if (fs::is_directory(output, ec)) throw UsageError(output + ": is a directory; -o takes a file name");
  for (const char* side : kDatabaseFiles)
    if (same_file(db + side, output))
      throw UsageError(output + ": is the database being exported (" + db + side + "); write to another file");
}

int64_t export_checked(const TaskBuffer& b, std::ostream& out, const buffer::ExportFilter& f) {
  try {
    return buffer::export_jsonl(b, out, f);
  } catch (const buffer::BufferError& e) {  // a corrupt page mid-file: the database is the bad input
    throw said_of(b.path(), e);
  }
}

int run_export(const BufferOptions& o) {
  if (o.format != "jsonl") throw UsageError("--format: only jsonl is supported");
  const bool to_stdout = o.output.empty() || o.output == "-";
  if (!to_stdout) check_export_target(o.db, o.output);
  TaskBuffer b = open_read(o.db);
  buffer::ExportFilter f;
  f.type = type_option(o.type);
  f.core_only = o.core;
  if (to_stdout) {
    // Lines stream out as they are read. The file was checked whole on open, so a page found
    // corrupt mid-file (one damaged since) comes after the lines before it: the error names the
    // file and the exit status is 2. Holding the export back would cost its size in memory; -o is
    // all or nothing.
    export_checked(b, std::cout, f);
    return 0;
  }
  // Written beside the target and renamed: an interrupted export never leaves half a file.
  ReplacedFile out(o.output);
  const int64_t n = export_checked(b, out.stream(), f);
  out.commit();
  std::cerr << "exported " << n << " task(s) to " << o.output << '\n';
  return 0;
}

// An existing database is opened with quick_check, so a corrupt one is refused before any write.
// A new one is built under a temporary name and linked into place only when complete, so a failed
// import leaves no file; link(), unlike rename(), never replaces a database that another process
// created meanwhile: then the tasks go into that one.
buffer::InsertResult insert_tasks(const std::string& db, const std::vector<buffer::Task>& tasks,
                                  buffer::Options opts) {
  opts.quick_check = true;
  std::error_code ec;
  if (fs::symlink_status(db, ec).type() == fs::file_type::not_found) {
    std::string tmp = temp_beside(db);
    RemoveOnExit cleanup(tmp);
    buffer::InsertResult r;
    try {
      TaskBuffer b = TaskBuffer::open(tmp, TaskBuffer::Mode::ReadWrite, opts);
      r = b.insert(tasks);  // b closes here: the last connection folds the write-ahead log in and deletes it
    } catch (const buffer::BufferError& e) {  // about the temporary name: say it of the database
      std::string message = e.what();
      if (message.rfind(tmp, 0) == 0) message = db + message.substr(tmp.size());
      throw buffer::BufferError(message);
    }
    if (fs::exists(tmp + "-wal", ec)) throw buffer::BufferError(db + ": the new database could not be finished");
    trainer::sync_path(tmp);  // SQLite synced it at its checkpoint; this does not rest on `synchronous`
    if (::link(tmp.c_str(), db.c_str()) == 0) {
      trainer::sync_path(parent_dir(db));  // the new name, durable
      return r;
    }
    // EEXIST: another process made it first. Otherwise (a file system without hard links) fall
    // back to creating it in place: a failure there may leave an empty buffer, never lose one.
  }
  TaskBuffer b = TaskBuffer::open(db, TaskBuffer::Mode::ReadWrite, opts);
  return b.insert(tasks);
}

int run_import(const BufferOptions& o) {
  // The whole input is read and checked before the database is opened, let alone created: a
  // refused import leaves no new file (InputFile refuses a directory, which reads as empty).
  refuse_a_run_buffer(o.db);
  InputFile input(o.file);
  const std::string& name = input.name();
  buffer::Options opts;
  opts.capacity_per_type = o.capacity;
  opts.policy = o.policy == "keep-oldest" ? buffer::CapacityPolicy::KeepOldest : buffer::CapacityPolicy::EvictOldest;
  opts.busy_timeout_seconds = o.wait_seconds;
  buffer::ImportReport rep;
  try {
    std::vector<buffer::Task> tasks;
    rep = buffer::read_jsonl(input.stream(), name, o.skip_invalid, tasks,
                             "use --skip-invalid to import the valid ones");
    rep.inserted = insert_tasks(o.db, tasks, opts);
  } catch (const buffer::BufferError& e) {
    throw UsageError(e.what());
  }
  for (const std::string& e : rep.errors) std::cerr << "skipped " << e << '\n';
  if (rep.invalid > int64_t(rep.errors.size()))
    std::cerr << "skipped " << rep.invalid - int64_t(rep.errors.size()) << " more invalid line(s)\n";
  // A field the format does not have is ignored (an annotation of the user's), and said: a typo of
  // an optional one ("stpe") would otherwise be lost without a word.
  if (!rep.ignored_fields.empty())
    std::cerr << "ignored field(s) that are not in the task format: " << buffer::ignored_fields_text(rep) << '\n';
  if (o.json) {
    ordered_json j = {{"lines", rep.lines},
                      {"imported", rep.inserted.inserted},
                      {"duplicates", rep.inserted.duplicates},
                      {"refused_full", rep.inserted.refused_full},
                      {"evicted", rep.inserted.evicted},
                      {"invalid", rep.invalid}};
    std::cout << dump(j) << '\n';
  } else {
    std::cout << "imported " << rep.inserted.inserted << " task(s) from " << name << " into " << o.db << " ("
              << rep.inserted.duplicates << " duplicate(s), " << rep.inserted.refused_full << " refused (full), "
              << rep.inserted.evicted << " evicted, " << rep.invalid << " invalid line(s) skipped)\n";
  }
  return 0;
}

int run_migrate(const BufferOptions& o) {
  refuse_a_run_buffer(o.db);
  buffer::Options opts;
  opts.quick_check = true;
  try {
    // ReadWriteExisting: a missing or empty file is refused, never made into a new buffer.
    TaskBuffer b = TaskBuffer::open(o.db, TaskBuffer::Mode::ReadWriteExisting, opts);
    std::cout << o.db << ": buffer schema " << b.schema_version() << '\n';
  } catch (const buffer::BufferError& e) {
    throw UsageError(e.what());
  }
  return 0;
}

}  // namespace

CLI::App* add_buffer_command(CLI::App& app, BufferOptions& o) {
  CLI::App* c = app.add_subcommand("buffer", "Inspect and move the tasks of a task buffer (SQLite)");
  c->require_subcommand(1);
  c->footer("Reads open the database read-only: they work while a trainer is writing it.");
  auto db = [&](CLI::App* s) { s->add_option("db", o.db, "task buffer database (run_dir/buffer.db)")
      ->check(non_empty_path())->required(); };
  auto json = [&](CLI::App* s) { s->add_flag("--json", o.json, "machine-readable output"); };

  CLI::App* stats = c->add_subcommand("stats", "Counts, growth per step, solve-rate and learnability distributions, "
                                               "duplicate rate, per type and origin");
  db(stats);
  json(stats);
  stats->callback([&] { o.action = "stats"; });

  CLI::App* list = c->add_subcommand("list", "List tasks");
  db(list);
  json(list);
  list->add_option("--type", o.type, "deduction, abduction or induction");
  list->add_option("--origin", o.origin, "seed, proposed or imported");
  list->add_option("--steps", o.steps, "steps A:B, inclusive (A: or :B for open ends)");
  list->add_option("--sort", o.sort, "id, step, learnability or solve-rate")->capture_default_str();
  list->add_flag("--desc", o.descending, "sort descending");
  list->add_option("--limit", o.limit, "at most N tasks (0 = all)")->capture_default_str()->check(non_negative());
  list->callback([&] { o.action = "list"; });

  CLI::App* show = c->add_subcommand("show", "One task: program, inputs/outputs, message, statistics, rollouts");
  db(show);
  show->add_option("id", o.id, "task id")->required()->check(positive());
  json(show);
  show->callback([&] { o.action = "show"; });

  CLI::App* exp = c->add_subcommand("export", "Write tasks as JSON lines (to stdout, or -o FILE)");
  db(exp);
  exp->add_option("--format", o.format, "jsonl")->capture_default_str();
  exp->add_option("--type", o.type, "only this type");
  exp->add_flag("--core", o.core, "only the import fields (type, program, input(s), output(s), message)");
  exp->add_option("-o,--output", o.output, "file to write (atomically)")->check(non_empty_path());
  exp->callback([&] { o.action = "export"; });

  CLI::App* imp = c->add_subcommand("import", "Add tasks from JSON lines (creates the database if missing)");
  db(imp);
  imp->add_option("file", o.file, "JSONL file, or - for stdin")->check(non_empty_path())->required();
  imp->add_flag("--skip-invalid", o.skip_invalid, "import the valid lines even if some are invalid");
  imp->add_option("--capacity", o.capacity,
                  "tasks kept per type, the oldest (or, with --policy keep-oldest, the new) past it left out; "
                  "a type this import adds a task to is cut back to it, the tasks already there included, and "
                  "the other types are left as they are (0 = unbounded)")
      ->capture_default_str()
      ->check(non_negative());
  imp->add_option("--policy", o.policy, "when full: evict-oldest or keep-oldest")
      ->check(CLI::IsMember({"evict-oldest", "keep-oldest"}))
      ->capture_default_str();
  imp->add_option("--wait", o.wait_seconds, "seconds to wait while another process writes the database")
      ->capture_default_str()
      ->check(between(0.0, 3600.0));
  json(imp);
  imp->footer("Writes the database (one transaction; a corrupt file is refused); a live run's buffer and a "
              "checkpoint's copy are refused.");
  imp->callback([&] { o.action = "import"; });

  CLI::App* mig = c->add_subcommand("migrate", "Bring a buffer written by an older azr to this schema");
  db(mig);
  mig->footer("Writes the database in place; a missing, empty or corrupt file is refused.");
  mig->callback([&] { o.action = "migrate"; });
  return c;
}

int run_buffer(const BufferOptions& o) {
  // What the buffer's reads refuse past the open (a task row written outside azr) is the file's
  // fault, exit 2 as on open: `show` of such a row said it with exit 1, `export` with 2.
  try {
    if (o.action == "stats") return run_stats(o);
    if (o.action == "list") return run_list(o);
    if (o.action == "show") return run_show(o);
    if (o.action == "export") return run_export(o);
    if (o.action == "import") return run_import(o);
    if (o.action == "migrate") return run_migrate(o);
  } catch (const buffer::BufferError& e) {
    throw said_of(o.db, e);
  }
  throw UsageError("buffer: unknown subcommand");
}

}  // namespace azr::cli
