// Task buffer throughput and latency at 10^4, 10^5 and 10^6 tasks, against the designs one
// writes without the buffer's slot numbering and batching, measured in the same run:
//   naive sample     SELECT ... WHERE type = ? ORDER BY random() LIMIT 64 (a scan of the type)
//   1-row txns       one transaction per task (insert() of a single task), for the insert rate
//
//   buffer_bench [--sizes 10000,100000,1000000] [--jsonl-tasks 100000] [--dir DIR] [--keep]
//                [--defer-checkpoints]
//
// One database grows through the sizes (ascending); at each size it measures:
//   build            tasks/s of the batches of 64 that grew it to this size, and the p50/p99
//                    latency of one 64-task insert over the second half of that growth
//   insert at cap    p50/p99 of a 64-task insert into a buffer held at this size by
//                    EvictOldest (capacity n/3 per type: every insert also evicts ~64)
//   1-row txns       tasks/s inserting 2,000 tasks one transaction each (the baseline), beside
//                    2,048 in batches of 64 at the same size (the batch speed-up is theirs)
//   refs k=6         sample_references(type, 6): what the proposer asks for each prompt
//   refs k=64        sample_references(type, 64): a uniform batch of 64
//   solver 64        sample_solver_batch(type, 64, last step): ~21 newest + ~43 uniform
//   naive 64         the ORDER BY random() baseline
//   bytes/task       (database + WAL after a TRUNCATE checkpoint) / tasks
//   open             a read-only open as the reading commands make it: the header, the schema
//                    checked against the latest (schema_difference), then with quick_check
//                    (every page read); the baseline is sqlite3_open_v2 and one PRAGMA read,
//                    and the schema check is also timed alone on that handle
// Then, on a database of its own (--jsonl-tasks, 0 = skip), the JSON Lines interchange that
// `azr buffer export` and `import` run:
//   export           export_jsonl of every task; the baseline dumps the same tasks from memory
//                    (task_to_json alone: what the database read adds)
//   read             read_jsonl alone: parsing and checking every line
//   import           import_jsonl into a fresh database (read, then one transaction); the
//                    baseline inserts the tasks read one transaction each, as a line-by-line
//                    importer would
// Tasks are synthetic but realistically sized (programs 200-400 bytes of varied Python, fixed
// seed), a third of each type. Prints a table and one JSON line; never asserts on time.
//
// --defer-checkpoints is a diagnostic, not the library's behaviour: it turns SQLite's automatic
// WAL checkpoint off on the bench's handles (PRAGMA wal_autocheckpoint = 0) and runs a passive
// checkpoint every 32 batches outside the timed region, to show how much of the insert tail is
// the checkpoint that SQLite otherwise runs inside the COMMIT that crosses 1000 WAL pages.
#include <CLI/CLI.hpp>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "buffer/schema.h"
#include "buffer/task_buffer.h"
#include "buffer/task_jsonl.h"

namespace {

namespace fs = std::filesystem;
namespace ab = azr::buffer;
using Clock = std::chrono::steady_clock;
using nlohmann::ordered_json;

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double round_to(double x, int digits) {
  double m = std::pow(10.0, digits);
  return std::round(x * m) / m;
}

// ---- synthetic tasks ---------------------------------------------------------------------------

const char* kNames[] = {"xs", "s", "nums", "text", "items", "d", "a", "b", "k", "n", "words", "grid"};
const char* kOps[] = {"+", "-", "*", "//", "%"};

std::string pick(std::mt19937_64& rng, const char* const* arr, size_t n) { return arr[rng() % n]; }

// A Python function of `target` bytes or a little more, unique through `serial`.
std::string program(std::mt19937_64& rng, int64_t serial) {
  const size_t target = 200 + rng() % 201;
  std::string a = pick(rng, kNames, 12), b = pick(rng, kNames, 12);
  if (a == b) b += "2";
  std::string p = "def f(" + a + ", " + b + "):\n    out = []\n";
  int depth = 1;
  while (p.size() + 40 < target) {
    std::string ind(static_cast<size_t>(4 * depth), ' ');
    int c = static_cast<int>(rng() % 6);
    std::string v = "v" + std::to_string(rng() % 10);
    std::string op = pick(rng, kOps, 5);
    std::string k = std::to_string(1 + rng() % 97);
    switch (c) {
      case 0: p += ind + "for i, " + v + " in enumerate(" + a + "):\n"; depth = std::min(depth + 1, 3); break;
      case 1: p += ind + "if len(out) > " + k + ":\n" + ind + "    break\n"; break;
      case 2: p += ind + "out.append(" + v + " " + op + " " + k + " if isinstance(" + v + ", int) else " + v + ")\n"; break;
      case 3: p += ind + v + " = sorted(" + b + ", key=lambda t: (t " + op + " " + k + ", t))\n"; break;
      case 4: p += ind + "while " + v + " and " + v + "[-1] == " + k + ":\n" + ind + "    " + v + ".pop()\n"; break;
      default: p += ind + "out.extend(str(c) for c in " + b + "[:" + k + "])\n"; break;
    }
    if (depth > 1 && rng() % 3 == 0) --depth;
  }
  p += "    return out[:" + std::to_string(serial) + "]\n";
  return p;
}

std::string list_repr(std::mt19937_64& rng) {
  std::string s = "[";
  size_t n = 2 + rng() % 7;
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(static_cast<int64_t>(rng() % 200) - 50);
  return s + "]";
}

ab::Task make_task(std::mt19937_64& rng, int64_t serial, int64_t step) {
  ab::Task t;
  t.type = static_cast<ab::TaskType>(serial % 3);
  t.origin = ab::Origin::Proposed;
  t.step = step;
  t.proposer_sample = "s" + std::to_string(step) + "-" + std::to_string(serial % 64);
  t.program = program(rng, serial);
  if (t.type == ab::TaskType::Induction) {
    for (int i = 0; i < 5; ++i) {
      t.inputs.push_back(list_repr(rng) + ", " + std::to_string(rng() % 10));
      t.outputs.push_back(list_repr(rng));
    }
    t.message = "The function keeps the elements that pass a test and transforms them; look at the order.";
  } else {
    t.input = list_repr(rng) + ", " + list_repr(rng);
    t.output = list_repr(rng);
  }
  return t;
}

// ---- measurements --------------------------------------------------------------------------------

struct Lat {
  double p50 = 0, p99 = 0;
  size_t n = 0;
  ordered_json json() const { return {{"p50_us", round_to(p50, 1)}, {"p99_us", round_to(p99, 1)}, {"calls", n}}; }
};

Lat lat(const std::vector<double>& us) { return {percentile(us, 0.5), percentile(us, 0.99), us.size()}; }

int64_t file_size(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::fprintf(stderr, "buffer_bench: %s: %s\n", sql, err ? err : "?");
    std::exit(1);
  }
}

// The baseline sampler: what one writes without slot numbers. Reads the same columns as the
// buffer's own sampler and materialises them the same way.
std::vector<ab::Task> naive_sample(sqlite3* db, ab::TaskType type, int k) {
  static const char* sql =
      "SELECT id, type, origin, program, input, output, inputs, outputs, message, step, proposer_sample, "
      "attempts, successes, learnability, times_referenced, times_served FROM tasks WHERE type = ? "
      "ORDER BY random() LIMIT ?";
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db, sql, -1, &s, nullptr);
  sqlite3_bind_int(s, 1, static_cast<int>(type));
  sqlite3_bind_int(s, 2, k);
  std::vector<ab::Task> out;
  auto text = [&](int c) {
    const unsigned char* p = sqlite3_column_text(s, c);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s, c)))
             : std::string();
  };
  while (sqlite3_step(s) == SQLITE_ROW) {
    ab::Task t;
    t.id = sqlite3_column_int64(s, 0);
    t.program = text(3);
    t.input = text(4);
    t.output = text(5);
    auto ins = nlohmann::json::parse(text(6), nullptr, false);
    if (ins.is_array())
      for (auto& v : ins) t.inputs.push_back(v.get<std::string>());
    auto outs = nlohmann::json::parse(text(7), nullptr, false);
    if (outs.is_array())
      for (auto& v : outs) t.outputs.push_back(v.get<std::string>());
    t.message = text(8);
    t.step = sqlite3_column_int64(s, 9);
    t.proposer_sample = text(10);
    out.push_back(std::move(t));
  }
  sqlite3_finalize(s);
  return out;
}

struct SizeResult {
  int64_t n = 0;
  double build_tasks_per_s = 0;
  Lat insert64, insert64_evicting, refs6, refs64, solver64, naive64;
  double single_txn_tasks_per_s = 0;
  double batch64_tasks_per_s_beside = 0;  // batches of 64 at the same size, beside the 1-row txns
  double batch_tasks_per_s_at_size = 0;
  double bytes_per_task = 0;
  int64_t db_bytes = 0;
  Lat open_read, open_quick_check, open_raw, schema_check;
};

struct JsonlResult {
  int64_t tasks = 0, bytes = 0;
  double export_s = 0, dump_s = 0;  // export_jsonl; the same tasks dumped from memory (baseline)
  double read_s = 0, import_s = 0;  // read_jsonl alone; import_jsonl into a fresh database
  int64_t per_line_tasks = 0;
  double per_line_s = 0;  // baseline: the first per_line_tasks read, one transaction each
};

double secs_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The JSON Lines interchange of `azr buffer export` / `import` on n tasks, in databases of its own
// under `dir` (removed after).
JsonlResult time_jsonl(const std::string& dir, int64_t n, std::mt19937_64& gen) {
  JsonlResult r;
  r.tasks = n;
  const std::string source = (fs::path(dir) / "jsonl_source.db").string();
  const std::string target = (fs::path(dir) / "jsonl_target.db").string();
  const std::string per_line = (fs::path(dir) / "jsonl_per_line.db").string();
  ab::Options unbounded;
  unbounded.capacity_per_type = 0;
  std::vector<ab::Task> made;
  {
    auto src = ab::TaskBuffer::open(source, ab::TaskBuffer::Mode::ReadWrite, unbounded);
    for (int64_t i = 0; i < n; i += 64) {
      std::vector<ab::Task> batch;
      for (int64_t k = i; k < std::min(n, i + 64); ++k) batch.push_back(make_task(gen, k, k / 64));
      src.insert(batch);
      made.insert(made.end(), batch.begin(), batch.end());
    }
    std::ostringstream out;
    auto t0 = Clock::now();
    if (ab::export_jsonl(src, out, {}) != n) std::exit(1);
    r.export_s = secs_since(t0);
    std::string dumped;
    t0 = Clock::now();
    for (const ab::Task& t : made) dumped += ab::task_to_json(t, false).dump() + '\n';
    r.dump_s = secs_since(t0);
    const std::string text = out.str();
    r.bytes = int64_t(text.size());

    std::istringstream read_in(text);
    std::vector<ab::Task> read;
    t0 = Clock::now();
    ab::read_jsonl(read_in, "bench", false, read);
    r.read_s = secs_since(t0);
    if (int64_t(read.size()) != n) std::exit(1);

    auto dst = ab::TaskBuffer::open(target, ab::TaskBuffer::Mode::ReadWrite, unbounded);
    std::istringstream import_in(text);
    t0 = Clock::now();
    if (ab::import_jsonl(dst, import_in, "bench", false).inserted.inserted != n) std::exit(1);
    r.import_s = secs_since(t0);

    // One transaction a line: 2,000 lines (at ~1 ms a commit, the whole file would take minutes).
    auto one_by_one = ab::TaskBuffer::open(per_line, ab::TaskBuffer::Mode::ReadWrite, unbounded);
    r.per_line_tasks = std::min<int64_t>(n, 2000);
    t0 = Clock::now();
    for (int64_t i = 0; i < r.per_line_tasks; ++i) one_by_one.insert({read[size_t(i)]});
    r.per_line_s = secs_since(t0);
  }
  for (const std::string& db : {source, target, per_line})
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db + suffix);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {10000, 100000, 1000000};
  std::string dir;
  bool keep = false, defer_checkpoints = false;
  CLI::App app{"Task buffer throughput and latency against ORDER BY random() and one-row transactions"};
  app.add_option("--sizes", sizes, "comma-separated buffer sizes, measured ascending")
      ->delimiter(',')
      ->capture_default_str();
  int64_t jsonl_tasks = 100000;
  app.add_option("--jsonl-tasks", jsonl_tasks, "tasks exported and imported as JSON Lines; 0 = skip that part")
      ->check(CLI::Range(int64_t(0), int64_t(10'000'000)))
      ->capture_default_str();
  app.add_option("--dir", dir, "folder for the database (default: a fresh temporary one)");
  app.add_flag("--keep", keep, "keep the database afterwards");
  app.add_flag("--defer-checkpoints", defer_checkpoints,
               "diagnostic: WAL checkpoints outside the timed region, not inside the COMMIT");
  CLI11_PARSE(app, argc, argv);
  // One database grows through the sizes, so they must come smallest first.
  std::sort(sizes.begin(), sizes.end());
  bool made_dir = false;
  if (dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "azr-buffer-bench-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = tmpl;
    made_dir = true;
  }
  const std::string db_path = (fs::path(dir) / "buffer_bench.db").string();
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db_path + suffix);

  std::mt19937_64 gen(20261122);   // task text
  std::mt19937_64 rng(1);          // the samplers
  std::vector<SizeResult> results;
  {
    ab::Options unbounded;
    unbounded.capacity_per_type = 0;
    auto buf = ab::TaskBuffer::open(db_path, ab::TaskBuffer::Mode::ReadWrite, unbounded);
    if (defer_checkpoints) exec(buf.handle(), "PRAGMA wal_autocheckpoint = 0");
    int64_t batches_done = 0;
    auto maybe_checkpoint = [&](sqlite3* db) {  // untimed; only with --defer-checkpoints
      if (defer_checkpoints && ++batches_done % 32 == 0) exec(db, "PRAGMA wal_checkpoint(PASSIVE)");
    };
    int64_t serial = 0, count = 0, step = 0;
    auto next_batch = [&](int64_t size) {
      std::vector<ab::Task> batch;
      batch.reserve(static_cast<size_t>(size));
      for (int64_t i = 0; i < size; ++i) batch.push_back(make_task(gen, serial++, step));
      ++step;  // one step per batch: the solver's "newest" are the last batch's ~21 per type
      return batch;
    };

    for (int64_t n : sizes) {
      SizeResult r;
      r.n = n;
      // Build: batches of 64 up to n (the last one shorter if needed).
      const int64_t from = count;
      std::vector<double> second_half;
      double build_us = 0;
      while (count < n) {
        auto batch = next_batch(std::min<int64_t>(64, n - count));
        auto t0 = Clock::now();
        auto ins = buf.insert(batch);
        double us = us_since(t0);
        build_us += us;
        if (count >= from + (n - from) / 2 && batch.size() == 64) second_half.push_back(us);
        count += ins.inserted;
        maybe_checkpoint(buf.handle());
        if (ins.inserted != static_cast<int64_t>(batch.size())) {
          std::fprintf(stderr, "buffer_bench: a synthetic task was a duplicate\n");
          return 1;
        }
      }
      r.build_tasks_per_s = build_us > 0 ? static_cast<double>(count - from) / (build_us / 1e6) : 0;
      r.insert64 = lat(second_half);

      // Size on disk: everything checkpointed into the main file.
      exec(buf.handle(), "PRAGMA wal_checkpoint(TRUNCATE)");
      r.db_bytes = file_size(db_path) + file_size(db_path + "-wal");
      r.bytes_per_task = static_cast<double>(r.db_bytes) / static_cast<double>(count);

      // Sampling on the writer's handle (the trainer's own), types in rotation.
      const int64_t last_step = step - 1;
      std::vector<double> t6, t64, ts, tn;
      for (int i = 0; i < 3000; ++i) {
        auto type = static_cast<ab::TaskType>(i % 3);
        auto t0 = Clock::now();
        auto s = buf.sample_references(type, 6, rng);
        t6.push_back(us_since(t0));
        if (s.size() != 6) return 1;
      }
      for (int i = 0; i < 1000; ++i) {
        auto type = static_cast<ab::TaskType>(i % 3);
        auto t0 = Clock::now();
        auto s = buf.sample_references(type, 64, rng);
        t64.push_back(us_since(t0));
        t0 = Clock::now();
        auto b = buf.sample_solver_batch(type, 64, last_step, rng);
        ts.push_back(us_since(t0));
        if (s.size() != 64 || b.size() != 64) return 1;
      }
      const int naive_reps = static_cast<int>(std::clamp<int64_t>(2000000 / n, 10, 300));
      for (int i = 0; i < naive_reps; ++i) {
        auto t0 = Clock::now();
        auto s = naive_sample(buf.handle(), static_cast<ab::TaskType>(i % 3), 64);
        tn.push_back(us_since(t0));
        if (s.size() != 64) return 1;
      }
      r.refs6 = lat(t6);
      r.refs64 = lat(t64);
      r.solver64 = lat(ts);
      r.naive64 = lat(tn);

      // Inserts at this size with the buffer full: EvictOldest holds it at ~n.
      {
        ab::Options capped;
        capped.capacity_per_type = count / 3;
        auto full = ab::TaskBuffer::open(db_path, ab::TaskBuffer::Mode::ReadWrite, capped);
        if (defer_checkpoints) exec(full.handle(), "PRAGMA wal_autocheckpoint = 0");
        full.insert(next_batch(64));  // trims the types to exactly n/3 each first
        std::vector<double> us;
        double total = 0;
        for (int i = 0; i < 300; ++i) {
          auto batch = next_batch(64);
          auto t0 = Clock::now();
          full.insert(batch);
          us.push_back(us_since(t0));
          total += us.back();
          maybe_checkpoint(full.handle());
        }
        r.insert64_evicting = lat(us);
        r.batch_tasks_per_s_at_size = 300.0 * 64 / (total / 1e6);
        count = buf.counts().by_type[0] + buf.counts().by_type[1] + buf.counts().by_type[2];
      }
      // Baseline: one transaction per task, beside batches of 64 at the same size.
      {
        double batched = 0;
        for (int i = 0; i < 32; ++i) {
          auto batch = next_batch(64);
          auto t0 = Clock::now();
          count += buf.insert(batch).inserted;
          batched += us_since(t0);
        }
        r.batch64_tasks_per_s_beside = 32.0 * 64 / (batched / 1e6);
        const int kSingles = 2000;
        double total = 0;
        for (int i = 0; i < kSingles; ++i) {
          std::vector<ab::Task> one = {make_task(gen, serial++, step)};
          auto t0 = Clock::now();
          count += buf.insert(one).inserted;
          total += us_since(t0);
        }
        ++step;
        r.single_txn_tasks_per_s = kSingles / (total / 1e6);
      }
      // Opens, read-only, with the writer's handle open (as while a run trains).
      {
        std::vector<double> plain, checked, raw, schema;
        for (int i = 0; i < 50; ++i) {
          auto t0 = Clock::now();
          auto ro = ab::TaskBuffer::open(db_path, ab::TaskBuffer::Mode::ReadOnly, ab::Options{});
          plain.push_back(us_since(t0));
          t0 = Clock::now();
          sqlite3* h = nullptr;
          if (sqlite3_open_v2(db_path.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return 1;
          exec(h, "PRAGMA user_version");
          raw.push_back(us_since(t0));
          t0 = Clock::now();
          if (!ab::schema_difference(h).empty()) return 1;
          schema.push_back(us_since(t0));
          sqlite3_close(h);
        }
        ab::Options with_check;
        with_check.quick_check = true;
        for (int i = 0; i < 5; ++i) {
          auto t0 = Clock::now();
          auto ro = ab::TaskBuffer::open(db_path, ab::TaskBuffer::Mode::ReadOnly, with_check);
          checked.push_back(us_since(t0));
        }
        r.open_read = lat(plain);
        r.open_quick_check = lat(checked);
        r.open_raw = lat(raw);
        r.schema_check = lat(schema);
      }
      results.push_back(r);
      std::fprintf(stderr, "buffer_bench: %lld tasks done\n", static_cast<long long>(n));
    }
  }
  std::optional<JsonlResult> jsonl;
  if (jsonl_tasks > 0) jsonl = time_jsonl(dir, jsonl_tasks, gen);

  // ---- report ------------------------------------------------------------------------------------
  std::printf("Task buffer (SQLite %s, WAL, synchronous=NORMAL), %u CPUs, programs 200-400 bytes%s\n\n",
              sqlite3_libversion(), std::thread::hardware_concurrency(),
              defer_checkpoints ? "; DIAGNOSTIC: automatic checkpoints off, run between batches untimed" : "");
  std::printf("Inserts (batches of 64 unless noted)\n");
  std::printf("| tasks | build tasks/s | insert64 p50 ms | p99 ms | at cap (evicting) tasks/s | p50 ms | p99 ms |"
              " 1-row txns tasks/s | batch speedup | bytes/task |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : results)
    std::printf("| %lld | %.0f | %.2f | %.2f | %.0f | %.2f | %.2f | %.0f | %.1fx | %.0f |\n",
                static_cast<long long>(r.n), r.build_tasks_per_s, r.insert64.p50 / 1e3, r.insert64.p99 / 1e3,
                r.batch_tasks_per_s_at_size, r.insert64_evicting.p50 / 1e3, r.insert64_evicting.p99 / 1e3,
                r.single_txn_tasks_per_s, r.batch64_tasks_per_s_beside / r.single_txn_tasks_per_s, r.bytes_per_task);
  std::printf("\nSampling latency, microseconds (p50 / p99)\n");
  std::printf("| tasks | refs k=6 | refs k=64 | solver batch 64 | naive ORDER BY random() 64 | naive / refs k=64 |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : results)
    std::printf("| %lld | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f (%zu runs) | %.0fx |\n",
                static_cast<long long>(r.n), r.refs6.p50, r.refs6.p99, r.refs64.p50, r.refs64.p99, r.solver64.p50,
                r.solver64.p99, r.naive64.p50, r.naive64.p99, r.naive64.n, r.naive64.p50 / r.refs64.p50);

  std::printf("\nRead-only open, microseconds (p50 / p99)\n");
  std::printf("| tasks | sqlite3_open_v2 + PRAGMA | schema_difference alone | TaskBuffer::open (schema checked) |"
              " + quick_check |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (const auto& r : results)
    std::printf("| %lld | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f |\n", static_cast<long long>(r.n),
                r.open_raw.p50, r.open_raw.p99, r.schema_check.p50, r.schema_check.p99, r.open_read.p50,
                r.open_read.p99, r.open_quick_check.p50, r.open_quick_check.p99);

  if (jsonl) {
    const JsonlResult& x = *jsonl;
    const double mb = double(x.bytes) / 1e6, n = double(x.tasks);
    std::printf("\nJSON Lines, %lld tasks, %.1f MB (tasks/s; MB/s of the text)\n", static_cast<long long>(x.tasks), mb);
    std::printf("| export | dump from memory (baseline) | read (parse + checks) | import (one transaction) |"
                " one transaction a line (baseline, %lld lines) | import speed-up |\n",
                static_cast<long long>(x.per_line_tasks));
    std::printf("|---:|---:|---:|---:|---:|---:|\n");
    std::printf("| %.0f (%.0f MB/s) | %.0f (%.0f MB/s) | %.0f (%.0f MB/s) | %.0f (%.0f MB/s) | %.0f | %.1fx |\n",
                n / x.export_s, mb / x.export_s, n / x.dump_s, mb / x.dump_s, n / x.read_s, mb / x.read_s,
                n / x.import_s, mb / x.import_s, double(x.per_line_tasks) / x.per_line_s,
                (n / x.import_s) / (double(x.per_line_tasks) / x.per_line_s));
  }

  ordered_json bars;
  const SizeResult* big = nullptr;
  for (const auto& r : results)
    if (r.n == 1000000) big = &r;
  if (big) {
    double sample_p99_ms = std::max(big->refs64.p99, big->solver64.p99) / 1e3;
    double insert_p99_ms = std::max(big->insert64.p99, big->insert64_evicting.p99) / 1e3;
    bool sample_ok = sample_p99_ms < 5, insert_ok = insert_p99_ms < 5;
    std::printf("\nBars at 10^6 tasks (p99, worst of the measured variants)%s:\n",
                defer_checkpoints ? " -- DIAGNOSTIC run, not the library's own behaviour" : "");
    std::printf("  sample a batch of 64 < 5 ms: %.2f ms -> %s\n", sample_p99_ms, sample_ok ? "met" : "NOT met");
    std::printf("  insert a batch of 64 < 5 ms: %.2f ms -> %s\n", insert_p99_ms, insert_ok ? "met" : "NOT met");
    bars = {{"sample64_p99_ms", round_to(sample_p99_ms, 3)},
            {"sample64_met", sample_ok},
            {"insert64_p99_ms", round_to(insert_p99_ms, 3)},
            {"insert64_met", insert_ok}};
  } else {
    std::printf("\n(the 5 ms bars are judged at 10^6 tasks, which this run did not include)\n");
  }

  ordered_json j;
  j["bench"] = "buffer";
  j["cpus"] = std::thread::hardware_concurrency();
  j["sqlite"] = sqlite3_libversion();
  j["defer_checkpoints"] = defer_checkpoints;
  j["sizes"] = ordered_json::array();
  for (const auto& r : results) {
    ordered_json s;
    s["tasks"] = r.n;
    s["build_tasks_per_s"] = std::round(r.build_tasks_per_s);
    s["insert64"] = r.insert64.json();
    s["insert64_at_capacity_evicting"] = r.insert64_evicting.json();
    s["at_capacity_tasks_per_s"] = std::round(r.batch_tasks_per_s_at_size);
    s["single_txn_tasks_per_s"] = std::round(r.single_txn_tasks_per_s);
    s["batch64_tasks_per_s_beside"] = std::round(r.batch64_tasks_per_s_beside);
    s["sample_references_k6"] = r.refs6.json();
    s["sample_references_k64"] = r.refs64.json();
    s["sample_solver_batch_64"] = r.solver64.json();
    s["naive_order_by_random_64"] = r.naive64.json();
    s["db_bytes"] = r.db_bytes;
    s["bytes_per_task"] = round_to(r.bytes_per_task, 1);
    s["open_sqlite3_baseline"] = r.open_raw.json();
    s["schema_difference"] = r.schema_check.json();
    s["open_read_only"] = r.open_read.json();
    s["open_read_only_quick_check"] = r.open_quick_check.json();
    j["sizes"].push_back(s);
  }
  if (!bars.is_null()) j["bars_at_1e6"] = bars;
  if (jsonl) {
    const JsonlResult& x = *jsonl;
    j["jsonl"] = {{"tasks", x.tasks},
                  {"bytes", x.bytes},
                  {"export_tasks_per_s", std::round(double(x.tasks) / x.export_s)},
                  {"dump_from_memory_tasks_per_s", std::round(double(x.tasks) / x.dump_s)},
                  {"read_tasks_per_s", std::round(double(x.tasks) / x.read_s)},
                  {"import_tasks_per_s", std::round(double(x.tasks) / x.import_s)},
                  {"one_txn_per_line_tasks_per_s", std::round(double(x.per_line_tasks) / x.per_line_s)},
                  {"one_txn_per_line_tasks", x.per_line_tasks}};
  }
  std::printf("\n%s\n", j.dump().c_str());

  if (!keep) {
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db_path + suffix);
    if (made_dir) fs::remove(dir);
  }
  return 0;
}
