#pragma once
// The task buffer: every valid task self-play produced, with how hard it turned out to be, in
// one SQLite file in the run directory (WAL mode: one writer, any number of concurrent readers,
// nothing lost when the trainer is killed between checkpoints).
//
// Every operation that changes the database is one transaction: a batch is either wholly in
// the file or not at all. Sampling is exact and uniform at any size: each task holds a dense
// per-type slot number (0..n-1, kept dense by swap-remove on eviction), so drawing K distinct
// tasks is K indexed look-ups, not a scan.
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

struct sqlite3;

namespace azr::buffer {

enum class TaskType : uint8_t { Deduction = 0, Abduction = 1, Induction = 2 };
enum class Origin : uint8_t { Seed = 0, Proposed = 1, Imported = 2 };

const char* type_name(TaskType t);    // "deduction", "abduction", "induction"
const char* origin_name(Origin o);    // "seed", "proposed", "imported"
std::optional<TaskType> parse_type(const std::string& s);
std::optional<Origin> parse_origin(const std::string& s);

// A task as METHOD.md defines it. Deduction/abduction use input/output (Python source of the
// argument list and the repr of the result); induction uses inputs/outputs and message.
struct Task {
  int64_t id = 0;  // assigned on insert
  TaskType type = TaskType::Deduction;
  Origin origin = Origin::Proposed;
  std::string program;
  std::string input, output;
  std::vector<std::string> inputs, outputs;
  std::string message;
  int64_t step = 0;               // training step that created it
  std::string proposer_sample;    // id of the proposer rollout that wrote it ("" if none)
  // solve statistics
  int64_t attempts = 0;
  int64_t successes = 0;
  std::optional<double> learnability;  // last estimate
  int64_t times_referenced = 0;        // shown to the proposer as a reference
  int64_t times_served = 0;            // given to the solver
};

// Rollouts kept for inspection (optional; see Options::rollout_retention_steps).
struct Rollout {
  int64_t step = 0;
  std::string role;  // "proposer" | "solver"
  TaskType type = TaskType::Deduction;
  std::optional<int64_t> task_id;
  std::string response;
  double reward = 0;
  bool correct = false;
  bool format_ok = false;
};

enum class CapacityPolicy : uint8_t {
  EvictOldest,  // azr default: the newest `capacity` tasks per type stay
  KeepOldest,   // the reference's behaviour: once full, new tasks are refused
};

struct Options {
  int64_t capacity_per_type = 16384;  // the paper's cap; 0 = unbounded
  CapacityPolicy policy = CapacityPolicy::EvictOldest;
  int64_t rollout_retention_steps = 0;  // keep rollouts of the last N steps; 0 = keep none
  double busy_timeout_seconds = 5;      // how long to wait for another writer's lock
  // Run SQLite's `PRAGMA quick_check` (every page read once, about a second per GB) on open,
  // before writing anything, migrations included, and refuse a corrupt file. SQLite itself
  // notices a bad page only when a statement touches it, so without this an import appends to a
  // damaged file, and a read that misses the bad page (a prompt's sampled references) answers
  // from it without a word. For hand-run commands; a trainer start skips the cost.
  bool quick_check = false;
};

struct InsertResult {
  std::vector<int64_t> ids;  // one per input task: the new id, or 0 if not inserted
  int64_t inserted = 0;
  int64_t duplicates = 0;    // same normalised fingerprint as a task of the same type
  int64_t refused_full = 0;  // KeepOldest and the type is full
  int64_t evicted = 0;       // EvictOldest: oldest tasks removed to make room
};

struct Counts {
  int64_t by_type[3] = {0, 0, 0};
  int64_t by_type_origin[3][3] = {};
};

// Errors the user can cause (missing file, not a database, newer schema, locked, bad field):
// one message naming the file and the problem.
struct BufferError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Normalised de-duplication key: line endings unified, trailing spaces, blank lines and
// whole-line comments dropped from the program; surrounding space dropped from inputs. Tasks
// that differ only in layout are the same task.
std::string fingerprint(const Task& t);

class TaskBuffer {
 public:
  // ReadWrite creates the file and the schema if missing and migrates an older schema forward.
  // ReadWriteExisting does the same to an existing azr buffer only: a missing or empty file is
  // refused, never created (`azr buffer migrate`: a typo must not make a new buffer).
  // ReadOnly requires an existing azr buffer (it never writes, so it works next to a running
  // trainer). Throws BufferError.
  enum class Mode { ReadOnly, ReadWrite, ReadWriteExisting };
  static TaskBuffer open(const std::string& path, Mode mode, Options options = {});
  ~TaskBuffer();
  TaskBuffer(TaskBuffer&&) noexcept;
  TaskBuffer& operator=(TaskBuffer&&) noexcept;

  static constexpr int kSchemaVersion = 1;
  int schema_version() const;
  const std::string& path() const { return path_; }

  // --- writes (one transaction each) ------------------------------------------------------
  InsertResult insert(const std::vector<Task>& tasks);
  // After `n` solver attempts with `k` successes: adds to the totals and stores a = k / n as
  // the latest learnability estimate when `is_estimate` (the proposer's n rollouts).
  void record_attempts(int64_t task_id, int64_t n, int64_t k, bool is_estimate);
  void mark_referenced(const std::vector<int64_t>& ids);
  void mark_served(const std::vector<int64_t>& ids);
  void add_rollouts(const std::vector<Rollout>& rollouts);  // applies the retention setting
  void set_meta(const std::string& key, const std::string& value);

  // --- reads ------------------------------------------------------------------------------
  // K distinct tasks of `type`, uniformly (fewer if the type holds fewer).
  std::vector<Task> sample_references(TaskType type, int k, std::mt19937_64& rng) const;
  // The solver's batch: tasks created at step >= `newest_since_step` (all of them, newest first,
  // or `batch` of them drawn uniformly when there are more), topped up with distinct uniform
  // samples of the rest.
  std::vector<Task> sample_solver_batch(TaskType type, int batch, int64_t newest_since_step,
                                        std::mt19937_64& rng) const;
  std::optional<Task> get(int64_t id) const;
  Counts counts() const;
  std::optional<std::string> meta(const std::string& key) const;
  std::vector<Rollout> rollouts_for_task(int64_t task_id) const;

  sqlite3* handle() const { return db_; }  // for the query layer (buffer/queries.h)

  // Writes a consistent copy of the whole database to `dest` (a new file; the trainer's
  // checkpoints hold one, so a resumed run samples from exactly the buffer it had). Throws
  // BufferError naming `dest`.
  void snapshot_to(const std::string& dest) const;

 private:
  class Checkpointer;  // a thread with its own connection: commits never pay for a checkpoint
  TaskBuffer() = default;
  sqlite3* db_ = nullptr;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::string path_;
  Options options_;
  bool read_only_ = true;
};

}  // namespace azr::buffer
