#include "trainer/trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "buffer/task_buffer.h"
#include "buffer/task_jsonl.h"
#include "eval/benchmarks.h"
#include "eval/model_eval.h"
#include "eval/task_eval.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"
#include "model/hf_config.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "proposer/seeding.h"
#include "sandbox/pool.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"
#include "trainer/console_view.h"
#include "trainer/dist.h"
#include "trainer/metrics.h"
#include "trainer/eval_setup.h"
#include "trainer/model_setup.h"
#include "trainer/imported_tasks.h"
#include "trainer/policy.h"
#include "trainer/run_lock.h"
#include "trainer/seeds.h"
#include "trainer/step.h"

namespace azr::trainer {

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_say_stopping{false};  // rank 0 says at once that the signal was taken (the others are quiet)
std::atomic<bool> g_had_sigint{false};
// For the line a second Ctrl-C leaves in log.txt (rank 0): the log's descriptor, the local time's
// offset from UTC and the line, its first 19 bytes the stamp's place, all set before the handler
// can read them.
std::atomic<int> g_log_fd{-1};
int64_t g_utc_offset_s = 0;
std::string g_second_ctrl_c_line;
constexpr size_t kStampBytes = 19;

// "YYYY-mm-dd HH:MM:SS" of local time, as RunLog stamps its lines, without the C library's time
// functions, which a signal handler may not call: days to a civil date by H. Hinnant's algorithm.
void stamp_now(char* out) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const int64_t t = int64_t(now.tv_sec) + g_utc_offset_s;
  int64_t days = t / 86400, secs = t % 86400;
  if (secs < 0) secs += 86400, days -= 1;
  days += 719468;
  const int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  const int64_t doe = days - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t day = doy - (153 * mp + 2) / 5 + 1, month = mp < 10 ? mp + 3 : mp - 9;
  const int64_t year = yoe + era * 400 + (month <= 2);
  const int64_t fields[] = {year, month, day, secs / 3600, secs / 60 % 60, secs % 60};
  const int widths[] = {4, 2, 2, 2, 2, 2};
  const char after[] = "-- ::";
  char* p = out;
  for (int f = 0; f < 6; ++f) {
    for (int w = widths[f] - 1, v = int(fields[f]); w >= 0; --w, v /= 10) p[w] = char('0' + v % 10);
    p += widths[f];
    if (f < 5) *p++ = after[f];
  }
}

extern "C" void on_stop_signal(int sig) {
  // The stop waits for the end of a step (or a seeding batch), which can take minutes: said at
  // once, so the first Ctrl-C is not taken for one that went unheard. write(2) is safe here.
  if (g_stop_signal.exchange(sig) == 0 && g_say_stopping) {
    static constexpr char kInt[] =
        "\nazr: Ctrl-C: stopping after this step (or seeding batch); Ctrl-C again stops at once, without a "
        "checkpoint\n";
    static constexpr char kTerm[] = "\nazr: SIGTERM: stopping after this step (or seeding batch)\n";
    if (sig == SIGINT)
      (void)!::write(STDERR_FILENO, kInt, sizeof kInt - 1);
    else
      (void)!::write(STDERR_FILENO, kTerm, sizeof kTerm - 1);
  }
  // A second Ctrl-C ends the process at once (the default action), said in log.txt first: a run
  // left to itself had a log that just stopped. A second SIGTERM does not: launchers pass SIGTERM
  // on to every rank (scripts/local_ranks.sh, torchrun, srun), and `timeout` or a scheduler may
  // signal the whole process group as well, so one stop can reach a rank twice; who means to end
  // it at once follows with SIGKILL.
  if (sig == SIGINT && g_had_sigint.exchange(true)) {
    if (const int fd = g_log_fd.load(); fd >= 0) {
      stamp_now(g_second_ctrl_c_line.data());
      (void)!::write(fd, g_second_ctrl_c_line.data(), g_second_ctrl_c_line.size());  // O_APPEND: whole
    }
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// run.profile_step: the step's op split, to op_profile_step<N>.json (rank k > 0:
// op_profile_step<N>_rank<k>.json) in the run directory; returns the log's line about it.
std::string write_op_profile(const fs::path& run_dir, int64_t step, int rank, const std::string& device,
                             const std::vector<kernels::OpTime>& ops, double step_seconds) {
  const std::string name =
      "op_profile_step" + std::to_string(step) + (rank > 0 ? "_rank" + std::to_string(rank) : "") + ".json";
  double in_ops = 0;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const kernels::OpTime& t : ops) {
    in_ops += t.seconds;
    nlohmann::ordered_json row = {{"op", t.op}, {"calls", t.calls}, {"seconds", t.seconds}};
    if (t.flops > 0) row["flops"] = t.flops;  // the products' (kernels/op_profile.h)
    rows.push_back(row);
  }
  const nlohmann::ordered_json doc = {{"step", step},          {"rank", rank},        {"device", device},
                                      {"step_seconds", step_seconds}, {"op_seconds", in_ops}, {"ops", rows}};
  const fs::path file = run_dir / name;
  std::ofstream out(file);
  out << doc.dump(1) << "\n";
  if (!out.flush()) throw std::runtime_error(file.string() + ": cannot write the op profile");
  std::string top;
  for (size_t i = 0; i < ops.size() && i < 5; i++)
    top += fmt::format("{}{} {:.0f}%", i ? ", " : "", ops[i].op, in_ops > 0 ? 100 * ops[i].seconds / in_ops : 0.0);
  return fmt::format("op profile of step {}: {:.2f} s in ops of the step's {:.2f} s; {} ({})", step, in_ops,
                     step_seconds, top, name);
}

// The run's log: log.txt in the run dir (rank 0), and the console above the progress line.
class RunLog {
 public:
  void open(const fs::path& file) { out_.open(file, std::ios::app); }
  void attach(ConsoleView* console) { console_ = console; }
  void operator()(const std::string& line) {
    to_file(line);
    if (console_)
      console_->message(line);
    else if (!quiet_)
      std::fprintf(stderr, "%s\n", line.c_str());
  }
  void set_quiet(bool q) { quiet_ = q; }
  // From the run's header line on, an error ends a run that began; before it, one refuses a start
  // or a resume, and the run directory's log is not the place (a finished run's log ended with a
  // resume's refusal).
  void begin_run() { begun_ = true; }
  bool run_begun() const { return begun_; }
  // To the file alone: what the console has already said (the error that ends the run). Also from
  // the sandbox pool's thread (LibraryMessagesToRunLog), hence the lock.
  void to_file(const std::string& line) { write_stamped(stamp_now() + "  " + line); }
  void write_stamped(const std::string& stamped_line) {
    std::lock_guard lock(file_mu_);
    if (out_.is_open()) out_ << stamped_line << std::endl;
  }
  static std::string stamp_now() {
    const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char stamp[32];
    std::tm local{};
    localtime_r(&t, &local);
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &local);
    return stamp;
  }

 private:
  std::mutex file_mu_;
  std::ofstream out_;
  ConsoleView* console_ = nullptr;
  bool quiet_ = false;
  bool begun_ = false;
};

// The library parts' messages (spdlog: the sandbox pool's worker lost and replaced, a worker that
// cannot start) into the run's log.txt as well as the console, while the run lasts: a run left in
// the background kept no record of them. Installed before the pool starts and removed after it
// stops (declared before it), so no thread logs while the logger's sinks change. Until the run
// begins (RunLog::begin_run) they are held, stamped, and written after its header line: a start
// or resume refused after the pool started (the workers' start-up warnings) leaves log.txt as it
// was, as RunLog does.
class LibraryMessagesToRunLog {
 public:
  explicit LibraryMessagesToRunLog(RunLog& log) : sink_(std::make_shared<Sink>(log)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  // The run has begun and its header is written: the held messages follow it, the rest go straight.
  void run_begun() { sink_->begin(); }
  ~LibraryMessagesToRunLog() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LibraryMessagesToRunLog(const LibraryMessagesToRunLog&) = delete;
  LibraryMessagesToRunLog& operator=(const LibraryMessagesToRunLog&) = delete;

 private:
  class Sink final : public spdlog::sinks::base_sink<std::mutex> {
   public:
    explicit Sink(RunLog& log) : log_(log) {}
    void begin() {
      std::lock_guard lock(mutex_);
      begun_ = true;
      for (const std::string& line : held_) log_.write_stamped(line);
      held_.clear();
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& m) override {  // with mutex_ held
      const spdlog::string_view_t level = spdlog::level::to_string_view(m.level);
      std::string line = RunLog::stamp_now() + "  " + std::string(level.data(), level.size()) + ": " +
                         std::string(m.payload.data(), m.payload.size());
      if (begun_)
        log_.write_stamped(line);
      else
        held_.push_back(std::move(line));
    }
    void flush_() override {}

   private:
    RunLog& log_;
    bool begun_ = false;
    std::vector<std::string> held_;
  };
  std::shared_ptr<Sink> sink_;
};

// A fast fingerprint of the weights, to check that every rank holds the same model.
uint64_t weights_hash(std::span<const float> p) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const unsigned char*>(p.data());
  const size_t n = p.size_bytes();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, b + i, 8);
    h = mix64(h ^ w);
  }
  for (; i < n; i++) h = mix64(h ^ b[i]);
  return h;
}

std::string summary_text(const Scalars& last, int64_t step, int64_t steps, double seconds, const fs::path& run_dir,
                         const std::string& checkpoint, const std::vector<std::string>& eval_lines) {
  auto get = [&](const std::string& k) {
    for (const auto& [key, v] : last)
      if (key == k) return v;
    return 0.0;
  };
  std::string s = fmt::format("azr train: {} of {} steps in {}\n", step, steps, format_duration(seconds));
  if (!last.empty()) {
    s += "                  deduction  abduction  induction\n";
    for (auto [label, key] : {std::pair{"proposer valid  ", "proposer/valid_rate/"},
                              std::pair{"learnability    ", "proposer/learnability/"},
                              std::pair{"solver accuracy ", "solver/accuracy/"}})
      s += fmt::format("  {}{:>9.3f}  {:>9.3f}  {:>9.3f}\n", label, get(std::string(key) + "deduction"),
                       get(std::string(key) + "abduction"), get(std::string(key) + "induction"));
    s += fmt::format("  buffer tasks    {:>9.0f}  {:>9.0f}  {:>9.0f}\n", get("buffer/size/deduction"),
                     get("buffer/size/abduction"), get("buffer/size/induction"));
  }
  for (const std::string& e : eval_lines) s += "  " + e + "\n";
  s += "  run dir     " + run_dir.string() + "\n";
  if (!checkpoint.empty()) s += "  checkpoint  " + checkpoint + "\n";
  s += "  inspect     azr buffer stats " + (run_dir / "buffer.db").string() + "\n";
  return s;
}

// config.toml, atomically: a kill or a failure leaves the old file or the new one, never half.
void write_run_config(const fs::path& run_dir, const TrainConfig& cfg) {
  const fs::path tmp = run_dir / ".config.toml.tmp";
  write_synced(tmp, to_toml(cfg));
  fs::rename(tmp, run_dir / "config.toml");
  sync_path(run_dir);
}

void refuse_a_run_dir_in_use(const fs::path& run_dir) {
  if (const std::optional<std::string> holder = run_lock_holder(run_dir))
    throw UserError(run_dir.string() + ": in use by " + *holder + "; choose another --run-dir");
  if (fs::exists(run_dir / "config.toml") || fs::exists(run_dir / "checkpoints") || fs::exists(run_dir / "buffer.db"))
    throw UserError(run_dir.string() + ": already holds a run; continue it with --resume " + run_dir.string() +
                    " or choose another --run-dir");
  // The files a new run replaces or adds to without a run's config beside them (a run's copied
  // metrics, another program's log): a new run removed metrics.jsonl and appended to log.txt,
  // and TensorBoard would draw an old event file's curves with the new run's.
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "metrics.jsonl" || name == "log.txt" || name.rfind("events.out.tfevents.", 0) == 0)
      throw UserError(run_dir.string() + ": holds " + name + ", which a new run would " +
                      (name == "log.txt" ? "add to" : name == "metrics.jsonl" ? "replace" : "be drawn with") +
                      " (it is not a run: no config.toml); move it or choose another --run-dir" +
                      (name == "log.txt" ? " (a shell's `tee` or a job scheduler's output file? the run writes its "
                                           "own log.txt: name that one otherwise)"
                                         : ""));
  }
}

// A new run's directory until its first checkpoint (step-0): a start that fails before then
// (a bad import file, a seeding error) takes away what it made, so the rerun is not refused as
// "already holds a run" and --resume has nothing half-made to continue. Only the run's own files
// go: the run directory if this process made it (with the parents it made, each only if empty, so
// another run started beside it in a new runs/ keeps its files), else the trainer's own entries
// that were not there before. Nothing is followed through a symlink, and a status that cannot be
// read stops the walk: what cannot be told apart is left alone.
class NewRunCleanup {
 public:
  explicit NewRunCleanup(const fs::path& run_dir) : run_dir_(run_dir) {
    std::error_code ec;
    // Not lexically_normal: "link/../runs" is resolved through the link, as create_directories does.
    fs::path p = fs::absolute(run_dir, ec);
    if (!p.has_filename()) p = p.parent_path();  // "runs/a/": the directory, not its empty last name
    for (; !ec && p.has_relative_path(); p = p.parent_path()) {
      const fs::file_type type = fs::symlink_status(p, ec).type();
      if (type != fs::file_type::not_found) break;
      ec.clear();
      made_.push_back(p);  // nearest first: the run directory, then its parents
    }
    if (made_.empty())
      for (const fs::directory_entry& e : fs::directory_iterator(run_dir, ec)) before_.push_back(e.path().filename());
  }
  NewRunCleanup(const NewRunCleanup&) = delete;
  NewRunCleanup& operator=(const NewRunCleanup&) = delete;
  void keep() { armed_ = false; }
  ~NewRunCleanup() {
    if (!armed_) return;
    std::error_code ec;
    if (!made_.empty()) {
      fs::remove_all(made_.front(), ec);  // the run directory, made by this process
      // Each parent only if empty (fs::remove); one never made (a create that failed part-way)
      // is passed over, one that holds another's files ends the walk.
      for (size_t k = 1; k < made_.size(); ++k)
        if (!fs::remove(made_[k], ec) && ec) break;  // false without an error: it did not exist
      return;
    }
    for (const fs::directory_entry& e : fs::directory_iterator(run_dir_, ec)) {
      const fs::path name = e.path().filename();
      if (!is_run_file(name.string()) || std::find(before_.begin(), before_.end(), name) != before_.end()) continue;
      std::error_code ec2;
      fs::remove_all(e.path(), ec2);
    }
  }

 private:
  // What train() writes into a run directory.
  static bool is_run_file(const std::string& name) {
    for (const char* exact :
         {"config.toml", ".config.toml.tmp", "checkpoints", "log.txt", "metrics.jsonl", kRunLockFile})
      if (name == exact) return true;
    return name.rfind("buffer.db", 0) == 0 || name.rfind(".buffer.db", 0) == 0 ||
           name.rfind("events.out.tfevents.", 0) == 0 || name.rfind("op_profile", 0) == 0;
  }

  fs::path run_dir_;
  std::vector<fs::path> made_;  // the directories this process made: the run dir (if it did), then its parents
  std::vector<fs::path> before_;
  bool armed_ = true;
};

// --resume on a run dir without a complete checkpoint starts the run over (seeding again, a new
// buffer.db and metrics.jsonl): right after a kill before step-0 was written, when everything
// there is remade identically. Once a checkpoint was written (log.txt says so) or a step recorded
// (metrics.jsonl), the checkpoints were lost or removed, and starting over would destroy the run's
// buffer and metrics: that is refused (UserError, exit 2), naming what is missing.
void check_start_over_loses_nothing(const fs::path& run_dir) {
  std::error_code ec;
  const fs::path metrics = run_dir / "metrics.jsonl";
  const bool has_metrics = fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0;
  bool had_checkpoint = false;
  std::ifstream log(run_dir / "log.txt");
  for (std::string line; !had_checkpoint && std::getline(log, line);)
    had_checkpoint = line.find("  checkpoint ") != std::string::npos && line.find("step-") != std::string::npos;
  if (!has_metrics && !had_checkpoint) return;
  throw UserError((run_dir / "checkpoints").string() + ": no complete checkpoint (step-N/trainer_state.json), but " +
                  (has_metrics ? metrics.string() + " records steps" : (run_dir / "log.txt").string() +
                                                                            " records a checkpoint written") +
                  "; resuming would start the run over and replace its buffer.db and metrics.jsonl. Restore the "
                  "checkpoints, or start a new run in another --run-dir");
}

// The first field of the model's shape in which `configured` differs from the checkpoint's
// config, as "F is A, the checkpoint's B"; "" when the shapes agree.
std::string architecture_difference(const model::ModelConfig& configured, const model::ModelConfig& checkpoint) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
      {"vocab_size", {configured.vocab_size, checkpoint.vocab_size}},
      {"hidden_size", {configured.hidden_size, checkpoint.hidden_size}},
      {"intermediate_size", {configured.intermediate_size, checkpoint.intermediate_size}},
      {"num_hidden_layers", {configured.num_hidden_layers, checkpoint.num_hidden_layers}},
      {"num_attention_heads", {configured.num_attention_heads, checkpoint.num_attention_heads}},
      {"num_key_value_heads", {configured.num_key_value_heads, checkpoint.num_key_value_heads}},
      {"head_dim", {configured.head_dim, checkpoint.head_dim}},
  };
  for (const auto& [name, v] : fields)
    if (v.first != v.second) return fmt::format("{} is {}, the checkpoint's {}", name, v.first, v.second);
  if (configured.tie_word_embeddings != checkpoint.tie_word_embeddings)
    return fmt::format("tie_word_embeddings is {}, the checkpoint's {}", configured.tie_word_embeddings,
                       checkpoint.tie_word_embeddings);
  if (configured.model_type != checkpoint.model_type)
    return fmt::format("model_type is {}, the checkpoint's {}", configured.model_type, checkpoint.model_type);
  return "";
}

// RUN/buffer.db from a checkpoint's snapshot, checked before it replaces anything: copied to a
// temporary file beside it, opened and its task counts compared with the checkpoint's, then
// renamed over the live buffer. A bad snapshot leaves the live buffer as it was. A live buffer
// whose counts by type and origin differ from the snapshot's is kept as buffer.db.before-resume
// (with its write-ahead log; an earlier resume's goes): besides the tasks of later steps, which
// the resumed run makes again, it may hold tasks a user imported into it, which a resume does not
// carry over and must not destroy. Returns the log's line about it, "" when nothing was kept.
std::string restore_buffer(const fs::path& snapshot, const fs::path& db, const TrainerState& state) {
  const fs::path tmp = db.parent_path() / ".buffer.db.restore.tmp";
  auto remove_side_files = [](const fs::path& f) {
    for (const char* suffix : {"-wal", "-shm"}) fs::remove(f.string() + suffix);
  };
  fs::remove(tmp);
  remove_side_files(tmp);
  buffer::Counts c;  // the snapshot's
  try {
    fs::copy_file(snapshot, tmp);  // inside: a copy that fails part-way (a full disk) is removed too
    try {
      // Read-write (on the copy), as the live buffer is opened below: a snapshot of an older schema
      // is migrated, not refused; an empty or missing one is refused, never made a new buffer.
      // quick_check: a damaged page (one the counts never read) would otherwise be carried into
      // every later checkpoint, and found only when a statement touched it, snapshots later.
      buffer::Options checked;
      checked.quick_check = true;
      c = buffer::TaskBuffer::open(tmp.string(), buffer::TaskBuffer::Mode::ReadWriteExisting, checked).counts();
    } catch (const buffer::BufferError& e) {
      throw std::runtime_error(snapshot.string() + ": not a usable buffer snapshot (" + e.what() + ")");
    }
    for (int t = 0; t < 3; t++)
      if (c.by_type[t] != state.buffer_tasks[t])
        throw std::runtime_error(snapshot.string() + ": the buffer snapshot holds " + std::to_string(c.by_type[t]) +
                                 " " + buffer::type_name(buffer::TaskType(t)) + " tasks, trainer_state.json says " +
                                 std::to_string(state.buffer_tasks[t]));
    // The check's connection is closed (its write-ahead log folded in): the copy is whole and,
    // once synced, durable. Until here nothing of the live buffer has been touched.
    remove_side_files(tmp);
    sync_path(tmp);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    for (const char* suffix : {"-wal", "-shm"}) fs::remove(tmp.string() + suffix, ec);
    throw;
  }
  std::string note;
  if (fs::exists(db)) {
    std::optional<buffer::Counts> live;  // none: a damaged live buffer, kept all the same
    try {
      live = buffer::TaskBuffer::open(db.string(), buffer::TaskBuffer::Mode::ReadOnly).counts();
    } catch (const buffer::BufferError&) {
    }
    const auto same = [&](const buffer::Counts& a) {
      return std::equal(&a.by_type_origin[0][0], &a.by_type_origin[0][0] + 9, &c.by_type_origin[0][0]);
    };
    if (!live || !same(*live)) {
      // With its side files: a WAL left beside the snapshot would be replayed into it, and the
      // kept copy needs it to hold what was last written. The previous copy's go first, all of
      // them, so a kill part-way cannot pair this copy with that one's WAL.
      const fs::path kept = db.parent_path() / "buffer.db.before-resume";
      for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(kept.string() + suffix);
      for (const char* suffix : {"", "-wal", "-shm"})
        if (fs::exists(db.string() + suffix)) fs::rename(db.string() + suffix, kept.string() + suffix);
      const auto total = [](const buffer::Counts& a) { return a.by_type[0] + a.by_type[1] + a.by_type[2]; };
      note = fmt::format("buffer.db is checkpoint step-{}'s snapshot ({} tasks); the buffer it replaced ({}) is kept "
                         "as {}: it holds the tasks of later steps, which the run makes again, and any imported into "
                         "it since the checkpoint, which a resume does not carry over",
                         state.step, total(c), live ? std::to_string(total(*live)) + " tasks" : "not readable",
                         kept.string());
    }
  }
  remove_side_files(db);
  fs::rename(tmp, db);
  sync_path(db.parent_path());
  return note;
}

// The run (train() below); `log` is opened once the run directory exists, and `run_lock` holds it
// (trainer/run_lock.h) until train() has written the log's last line.
int run_training(const TrainOptions& opt, RunLog& log, std::optional<RunDirLock>& run_lock) {
  // ---- ranks, config, run dir -------------------------------------------------------------
  // The config, the device and the micro-batch first, from the launcher's environment alone: a bad
  // config stops each rank at once, not after the ranks have met (or timed out waiting for one
  // that stopped), and the GPU is chosen before MPI starts (a CUDA-aware MPI may otherwise make
  // every rank's first context on GPU 0). The cost: a failure of one rank alone here (its GPU
  // unusable) leaves TCP peers in the rendezvous until its timeout, where they saw it end at the
  // first barrier; launchers (torchrun, scripts/local_ranks.sh, mpirun) stop them sooner.
  const dist::LaunchInfo launch = dist::detect_launch();
  const bool resuming = !opt.resume_dir.empty();

  const std::string config_path = resuming ? (fs::path(opt.resume_dir) / "config.toml").string() : opt.config_path;
  TrainConfig cfg;
  try {
    cfg = load_config(config_path, opt.overrides);
  } catch (const ConfigError& e) {
    // The wrong one of the two commands: a run directory given as the config, a checkpoint or
    // another folder as the run directory. Said with the command that was meant.
    std::error_code ec;
    std::string hint;
    if (!resuming && fs::is_directory(config_path, ec) && fs::exists(fs::path(config_path) / "config.toml", ec))
      hint = "; " + config_path + " holds a run: to continue it, azr train --resume " + config_path;
    else if (resuming && fs::exists(config_path, ec)) {
      // the run's own config.toml, with a bad value or a bad --set: the error says which
    } else if (resuming && fs::exists(fs::path(opt.resume_dir) / "trainer_state.json", ec)) {
      fs::path checkpoint = fs::absolute(opt.resume_dir, ec).lexically_normal();
      if (!checkpoint.has_filename()) checkpoint = checkpoint.parent_path();  // "step-3/": the directory
      hint = "; " + opt.resume_dir + " is a checkpoint: --resume takes its run directory (" +
             checkpoint.parent_path().parent_path().string() + ")";
    } else if (resuming) {
      hint = "; --resume takes the directory of a run azr train started (it holds config.toml)";
    }
    throw UserError(e.what() + hint);
  }
  const TrainConfig as_written = cfg;  // before a resume's fallback to the checkpoint's model (below)
  // A checkpoint is a whole Hugging Face model (config.json, tokenizer.json, weights), so a resume
  // whose model.path is gone (a run directory copied to another machine, a base model deleted)
  // reads the model's config and tokenizer from the newest checkpoint. The saved config keeps
  // naming model.path.
  // Checks the config's schema leaves to the trainer, named as the schema's are (file:line:col).
  auto config_error = [&](std::string_view key, const std::string& message) {
    return UserError(config_key_origin(config_path, opt.overrides, key) + std::string(key) + ": " + message);
  };
  auto set_on_the_command_line = [&](std::string_view key) {
    return config_key_origin(config_path, opt.overrides, key).rfind("--set ", 0) == 0;
  };
  // A resume runs where --resume says; the key was ignored, and saved into config.toml.
  if (resuming && set_on_the_command_line("run.run_dir"))
    throw config_error("run.run_dir", "a resume runs in the directory --resume names; drop this --set");
  // A model.path given now that is not there is a typo, not a model gone since the run began: it
  // fell back to the checkpoint and was saved into config.toml.
  ModelSection configured_model;
  std::optional<fs::path> model_from_checkpoint;
  if (resuming && !cfg.model.path.empty() && !fs::exists(fs::path(cfg.model.path) / "config.json") &&
      !set_on_the_command_line("model.path"))
    if ((model_from_checkpoint = latest_checkpoint(opt.resume_dir))) {
      configured_model = cfg.model;
      cfg.model.path = model_from_checkpoint->string();
      if (!cfg.model.tokenizer.empty() && !fs::exists(cfg.model.tokenizer)) cfg.model.tokenizer.clear();
    }
  // A file a key names that is missing or wrong: the messages of the checks below start "KEY: ".
  // Said with where the key was set (file:line:col, or --set), and for a path written relative,
  // the directory it was read from (a run started from another directory than the config's).
  auto with_origin = [&](const UserError& e) -> UserError {
    const std::string m = e.what();
    const std::pair<std::string_view, const std::string*> keys[] = {
        {"model.path", &as_written.model.path},          {"model.tokenizer", &as_written.model.tokenizer},
        {"model.preset", nullptr},                       {"eval.benchmarks", nullptr},
        {"eval.data_dir", &as_written.eval.data_dir},    {"eval.heldout_tasks", &as_written.eval.heldout_tasks},
        {"seeding.import_tasks", &as_written.seeding.import_tasks}};
    for (const auto& [key, value] : keys) {
      const std::string prefix = std::string(key) + ": ";
      if (m.rfind(prefix, 0) != 0) continue;
      std::string where;
      if (value && !value->empty() && fs::path(*value).is_relative())
        where = fmt::format(" ({} is relative: it was read from the working directory, {})", *value,
                            fs::current_path().string());
      return config_error(key, m.substr(prefix.size()) + where);
    }
    return e;
  };
  // `check()`'s result, its UserError said with_origin.
  auto keyed = [&](auto&& check) {
    try {
      return check();
    } catch (const UserError& e) {
      throw with_origin(e);
    }
  };
  if (!cfg.model.preset.empty()) {
    try {
      (void)model::preset_config(cfg.model.preset);  // before anything is written
    } catch (const model::ConfigError& e) {
      throw config_error("model.preset", e.what());
    }
  }
  // Seeding stops when every type holds seeding.target tasks; a buffer capped below that never
  // does, and seeding would burn all of seeding.max_rounds evicting what it had grown. A resume
  // does not seed.
  if (!resuming && cfg.buffer.capacity_per_type != 0 && cfg.buffer.capacity_per_type < cfg.seeding.target)
    throw config_error("buffer.capacity_per_type",
                       fmt::format("({}) is below seeding.target ({}): seeding could never reach its target; raise "
                                   "the capacity (0 = unbounded) or lower the target",
                                   cfg.buffer.capacity_per_type, cfg.seeding.target));
  // The schema allows 0 (azr bootstrap decodes greedily); training samples.
  if (cfg.algorithm.temperature <= 0)
    throw config_error("algorithm.temperature", fmt::format("training samples, so it must be > 0, got {}",
                                                            cfg.algorithm.temperature));
  // AdamW's decoupled decay multiplies every weight by 1 - lr * weight_decay each step: at 0 or
  // below, one step zeroes every weight or flips its sign (weight_decay = 1e6 at lr = 1e-6 took
  // the embedding from 1e-2 to 1e-6 in a step, and the run went on).
  // In float, as the optimizer computes it (the schema keeps lr within a float's range).
  if (!(float(cfg.algorithm.lr) * float(cfg.algorithm.weight_decay) < 1.f))
    throw config_error("algorithm.weight_decay",
                       fmt::format("({}) times algorithm.lr ({}) is {}: each step multiplies every weight by 1 - lr "
                                   "* weight_decay, which must stay above 0",
                                   cfg.algorithm.weight_decay, cfg.algorithm.lr,
                                   float(cfg.algorithm.lr) * float(cfg.algorithm.weight_decay)));
  if (cfg.run.gradient_allreduce == "nccl" && cfg.model.device != "cuda")
    throw UserError("run.gradient_allreduce = \"nccl\" sums gradients on GPUs: it needs model.device = \"cuda\" (the "
                    "run has \"" + cfg.model.device + "\"); use \"host\"");
  if (cfg.run.gradient_allreduce == "nccl" && !dist::nccl_compiled())
    throw UserError("run.gradient_allreduce = \"nccl\": this build of azr has no NCCL (CUDA and NCCL must be found "
                    "when it is configured; set NCCL_HOME); use \"host\"");
  // The device too, before anything is written: a run dir left behind would refuse the rerun.
  // With run.profile_step, the model runs on the table's profiled twin, which only forwards each
  // call until that step (kernels/op_profile.h).
  const kernels::Ops& device_ops = model_backend(cfg, launch.local_rank);
  const kernels::Ops& backend = cfg.run.profile_step > 0 ? kernels::profiled_ops(device_ops) : device_ops;
  // micro_batch_size = 0 stays 0 in the saved config (a resume plans again) and is resolved here.
  const MicroBatchChoice micro =  // reads model.path's config
      keyed([&] { return resolve_micro_batch(cfg, launch.local_rank, launch.local_world_size); });
  const fs::path run_dir = resuming              ? fs::path(opt.resume_dir)
                           : !opt.run_dir.empty() ? fs::path(opt.run_dir)
                           : !cfg.run.run_dir.empty() ? fs::path(cfg.run.run_dir)
                                                       : fs::path("runs") / cfg.run.name;
  // A benchmark folder found by the fallbacks ($AZR_BENCHMARKS, ../shared/benchmarks from the
  // working directory) goes into the resolved config too: a resume from elsewhere would find
  // none and turn the evaluation off. Found nowhere, it stays "" (evaluation off, and the log
  // says why).
  if (!resuming && cfg.eval.data_dir.empty() && !cfg.eval.benchmarks.empty()) try {
      cfg.eval.data_dir = eval::resolve_data_dir("").string();
    } catch (const eval::BenchmarkError&) {
    }
  // A resume on another machine, where the saved folder is not: the same fallbacks, said in the log.
  std::string data_dir_note;
  if (resuming && !cfg.eval.data_dir.empty() && !fs::is_directory(cfg.eval.data_dir)) try {
      const std::string found = fs::absolute(eval::resolve_data_dir("")).lexically_normal().string();
      data_dir_note = fmt::format("eval.data_dir {} is gone: the benchmarks are read from {} (found through "
                                  "$AZR_BENCHMARKS or ../shared/benchmarks)", cfg.eval.data_dir, found);
      cfg.eval.data_dir = found;
    } catch (const eval::BenchmarkError&) {
    }
  // Paths are relative to the working directory (as in most trainers' configs); the resolved
  // config holds them absolute, so --resume works from anywhere.
  for (std::string* p : {&cfg.model.path, &cfg.model.tokenizer, &cfg.seeding.import_tasks, &cfg.eval.data_dir,
                         &cfg.eval.heldout_tasks})
    if (!p->empty()) *p = fs::absolute(*p).lexically_normal().string();
  cfg.run.run_dir = fs::absolute(run_dir).lexically_normal().string();
  // Every file the config names, before the ranks meet and before anything is written (a run dir
  // left behind would refuse the rerun): the tokenizer, the benchmarks and their data, the
  // held-out tasks, the import file. The model's weights are loaded below, still before the run dir.
  // Only the launch's rank 0 (rank 0 once the ranks meet) reads what rank 0 alone uses: the
  // evaluation data and the import file may exist on its node only. It also refuses a directory
  // that holds a run before anything is loaded, which takes minutes for a large model.
  const bool launch_root = launch.rank == 0;
  const model::ModelConfig model_cfg = keyed([&] { return model_config(cfg); });  // before its tokenizer
  std::unique_ptr<model::Tokenizer> tok = keyed([&] { return make_tokenizer(cfg); });
  const std::string tokenizer_file = keyed([&] { return tokenizer_json(cfg, *tok); });  // what checkpoints carry
  // Every id the tokenizer gives needs an embedding row: another model's tokenizer failed at the
  // first prompt of step 1 with "token id N is outside the vocabulary", naming no file, exit 1.
  if (int64_t(tok->vocab_size()) > model_cfg.vocab_size)
    throw UserError(fmt::format("the tokenizer ({}) has {} token ids, past the model's {} embedding rows: it is not "
                                "this model's tokenizer (model.tokenizer, model.path)",
                                cfg.model.tokenizer.empty() && cfg.model.path.empty() ? "the byte tokenizer"
                                : cfg.model.tokenizer.empty() ? cfg.model.path + "/tokenizer.json"
                                                              : cfg.model.tokenizer,
                                tok->vocab_size(), model_cfg.vocab_size));
  // A limit below a prompt's fixed text: no prompt of that kind could be generated for, and the
  // run skipped every one, step after step, and finished with exit 0 having trained on nothing.
  if (const BarePrompt bare = longest_bare_prompt(*tok, cfg); bare.tokens > cfg.algorithm.max_prompt_tokens)
    throw config_error("algorithm.max_prompt_tokens",
                       fmt::format("({}) is below the {} tokens of the {} prompt with no reference and an empty "
                                   "program, which every such prompt holds and more: none could be generated for",
                                   cfg.algorithm.max_prompt_tokens, bare.tokens, bare.kind));
  // Rank 0's refusal, alone, stops it at once. With peers it is kept until the ranks meet and then
  // told to every rank, which stops with it: the others would otherwise wait out the rendezvous
  // (--dist-timeout) for a rank that had left, and report the wait.
  std::string root_refusal;
  auto refuse_at_root = [&](auto&& check) {
    try {
      check();
    } catch (const UserError& e) {
      if (launch.world_size == 1) throw;
      root_refusal = e.what();
    }
  };
  // A resume takes the run directory before it reads which checkpoint is newest: a live run could
  // be writing the next one. A new run takes it once the directory exists (below).
  if (resuming && launch_root) refuse_at_root([&] { run_lock.emplace(run_dir); });
  std::optional<fs::path> ckpt = resuming ? latest_checkpoint(run_dir) : std::nullopt;
  if (resuming && !ckpt && root_refusal.empty()) check_start_over_loses_nothing(run_dir);
  std::vector<eval::Benchmark> benches;
  std::string eval_off, heldout_off;
  std::vector<buffer::Task> heldout;
  std::string ckpt_checked;  // what the checksum check found, for the log
  std::vector<buffer::Task> imported;  // seeding.import_tasks, checked (rank 0 of a new run)
  std::string imported_ignored;        // its fields not in the task format, said at seeding
  // A resume trains the checkpoint's weights, whatever [model] says; one naming another
  // architecture (--set model.preset=..., a model.path of another size with the same tokenizer)
  // would have the log, the saved config and the micro-batch's memory plan describe a model the
  // run does not train.
  auto refuse_a_model_unlike_the_checkpoints = [&](const model::ModelConfig& configured, const fs::path& ck) {
    model::ModelConfig saved;
    try {
      saved = model::load_config((ck / "config.json").string());
    } catch (const model::ConfigError& e) {
      throw UserError(e.what());
    }
    if (const std::string diff = architecture_difference(configured, saved); !diff.empty()) {
      const bool preset = !cfg.model.preset.empty();
      throw config_error(preset ? "model.preset" : "model.path",
                         fmt::format("{}: {} ({}): a resume trains the checkpoint's weights, so [model] must name "
                                     "the run's model (a new run trains another)",
                                     preset ? cfg.model.preset : cfg.model.path, diff, (ck / "config.json").string()));
    }
  };
  auto checks_of_keys = [&] {
    if (!resuming) {
      refuse_a_run_dir_in_use(run_dir);
      refuse_a_directory_that_cannot_be_made(run_dir,
                                             "run directory " + run_dir.string() + " (--run-dir, run.run_dir): ");
    }
    // Before anything reads it: a damaged weight file would otherwise load and train on quietly.
    // Rank 0 of the launch reads every byte once; the other ranks read the same files after it.
    if (ckpt) {
      try {
        ckpt_checked = verify_checksums(*ckpt) ? ", checksums verified" : ", written without checksums";
      } catch (const std::runtime_error& e) {
        throw UserError(std::string("resume: ") + e.what());
      }
      // After the checksums: a checkpoint copy damaged on disk is named as such, not as a change.
      refuse_a_tokenizer_unlike_the_checkpoints(cfg, tokenizer_file, *ckpt);
      refuse_a_model_unlike_the_checkpoints(model_cfg, *ckpt);
    }
    // A new run checks the eval keys with evaluation off too: a typo is said now, not when it is
    // turned on. A resume with it off does not need its data where it was.
    if (!resuming || cfg.eval.every > 0) try {
        check_eval_keys(cfg);
      } catch (const UserError& e) {
        // A run directory resumed elsewhere (model.path gone, say, with the held-out tasks that
        // azr bootstrap wrote beside the model): the checkpoint holds no copy of them.
        if (!resuming || std::string_view(e.what()).rfind("eval.heldout_tasks:", 0) != 0) throw;
        throw UserError(std::string(e.what()) + "; a resume reads it where the run's config says, the checkpoint "
                        "holds no copy: --set eval.heldout_tasks=FILE names a copy, --set eval.heldout_tasks= turns "
                        "the held-out evaluation off");
      }
    if (cfg.eval.every > 0) {
      // No data given and none in the usual places: train without evaluating, and say so (below).
      benches = load_eval_benchmarks(cfg, &eval_off);
      if (!cfg.eval.heldout_tasks.empty()) {
        try {
          heldout = eval::load_tasks_jsonl(cfg.eval.heldout_tasks);
        } catch (const std::runtime_error& e) {
          throw UserError(std::string("eval.heldout_tasks: ") + e.what());
        }
        // (azr bootstrap with bootstrap.heldout_per_type = 0 writes an empty file.)
        if (heldout.empty()) heldout_off = cfg.eval.heldout_tasks + " holds no tasks";
      }
    }
    if (!ckpt && !cfg.seeding.import_tasks.empty()) {
      // Checked as the run would use them (trainer/imported_tasks.h): one whose program does not
      // give its output could never be solved. Here, before the ranks meet, the run directory
      // exists or the model loads, so every rank stops with rank 0's message.
      const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
      imported = read_checked_imports(cfg.seeding.import_tasks, sandbox_limits(cfg),
                                      cfg.sandbox.workers > 0 ? cfg.sandbox.workers : cores, &imported_ignored);
    }
  };
  if (launch_root && root_refusal.empty()) refuse_at_root([&] { keyed(checks_of_keys); });
  // A run that starts from model.path or a preset (not a checkpoint): its model now, so a bad
  // model directory stops the run before its directory exists.
  std::optional<model::Transformer> start_model;
  if (!ckpt && root_refusal.empty()) start_model.emplace(keyed([&] { return initial_model(cfg, backend); }));

  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(
      launch, opt.comm_backend, std::chrono::milliseconds(int64_t(opt.dist_timeout_s * 1000.0)));
  const bool root = comm->rank() == 0;
  if (comm->size() > 1) {
    const std::string refusal = comm->allgather(root_refusal).front();
    if (!refusal.empty()) throw UserError(root ? refusal : "rank 0 stopped: " + refusal);
  } else if (!root_refusal.empty()) {
    throw UserError(root_refusal);
  }
  if (!root) benches.clear(), heldout.clear();  // rank 0 evaluates
  std::optional<NewRunCleanup> cleanup;
  if (root && !resuming) {
    cleanup.emplace(run_dir);
    fs::create_directories(run_dir);
    // Another new run given the same directory at the same moment passed the checks above too:
    // the one that takes the lock goes on, the other leaves everything as it is (its cleanup
    // would take the winner's files).
    try {
      run_lock.emplace(run_dir);
    } catch (const UserError&) {
      if (run_lock_holder(run_dir)) cleanup->keep();  // another run's: nothing here is this one's
      throw;
    }
    // Before anything else of the run: config.toml is what --resume reads back and what marks the
    // directory as holding a run, so a kill before its rename leaves a directory that a plain
    // rerun accepts, and a kill after it leaves one --resume continues. A resume rewrites it (new
    // run.steps, run_dir) only once its checkpoint has loaded (below): a failed resume leaves it.
    write_run_config(run_dir, cfg);
    fs::create_directories(run_dir / "checkpoints");
  }
  comm->barrier();
  // From here a signal stops the run where it can end cleanly: after seeding's current batch
  // (a new run: its directory is removed, as nothing was saved) or after the current step.
  g_say_stopping = root;
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  // Every rank reads the checkpoint from rank 0's run directory itself: one that saw another
  // newest checkpoint (a filesystem not shared, or behind) would train other weights, or call other
  // collectives than rank 0 and hang. Each rank stops here alike, naming what it found.
  if (resuming)
    dist::check_ranks_agree(*comm, ckpt ? ckpt->filename().string() : "no checkpoint",
                            "resume: the newest checkpoint in " + run_dir.string() +
                                " (every rank must see rank 0's run directory, e.g. on a shared filesystem)");
  const auto configured_micro_batch = cfg.algorithm.micro_batch_size;  // 0 (plan it) is saved as 0
  cfg.algorithm.micro_batch_size = micro.size;

  log.set_quiet(!root);
  std::optional<LibraryMessagesToRunLog> library_messages;  // before the pool: removed after it
  if (root) {
    log.open(run_dir / "log.txt");
    library_messages.emplace(log);
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    g_utc_offset_s = local.tm_gmtoff;
    g_second_ctrl_c_line = std::string(kStampBytes, ' ') +
                           "  stopped at once by a second Ctrl-C, without a checkpoint of the step it was in; resume "
                           "from the last one with: azr train --resume " + run_dir.string() + "\n";
    g_log_fd = ::open((run_dir / "log.txt").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  }

  // ---- threads: the model's own cores, the sandbox's own workers ---------------------------
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const int share = std::max(1, cores / std::max(1, launch.local_world_size));
  kernels::set_cpu_threads(cfg.run.threads > 0 ? cfg.run.threads : share);

  // ---- model, tokenizer, optimizer ---------------------------------------------------------
  std::optional<TrainerState> state;
  if (ckpt) {
    try {
      state = read_trainer_state(*ckpt / "trainer_state.json");
    } catch (const std::runtime_error& e) {
      throw UserError(e.what());
    }
  }
  if (state && state->seed != cfg.run.seed)
    throw UserError(ckpt->string() + ": written with run.seed " + std::to_string(state->seed) + ", config says " +
                    std::to_string(cfg.run.seed));
  model::Transformer m = ckpt ? load_model_dir(*ckpt, backend) : std::move(*start_model);
  start_model.reset();
  m.set_recompute(cfg.model.recompute);
  m.set_decode_graphs(cfg.model.decode_graphs);
  Policy policy(std::move(m), std::move(tok), adamw_settings(cfg));
  // Collective: every rank makes its NCCL communicator here, on the GPU model_backend selected.
  const bool nccl_gradients = cfg.run.gradient_allreduce == "nccl" && comm->size() > 1;
  if (nccl_gradients)
    policy.set_device_reducer(dist::make_nccl_reducer(*comm, kernels::device_stream(cfg.model.device)));
  if (ckpt) {
    try {
      policy.optimizer().load(*ckpt / "optimizer.safetensors");
    } catch (const model::SafetensorsError& e) {
      throw UserError(e.what());
    }
    policy.optimizer().set_lr(cfg.algorithm.lr);
  }

  // ---- sandbox -----------------------------------------------------------------------------
  sandbox::PoolOptions po;
  po.workers = cfg.sandbox.workers > 0 ? cfg.sandbox.workers : share;
  sandbox::Pool pool(po);

  // ---- buffer, data RNG (rank 0) ------------------------------------------------------------
  std::optional<buffer::TaskBuffer> buf;
  std::string buffer_note;  // what the restore kept, logged after the run's header
  std::mt19937_64 data_rng(derive_seed(cfg.run.seed, {uint64_t(SeedPhase::Data)}));
  const fs::path db = run_dir / "buffer.db";
  if (root) {
    if (ckpt) {
      // The buffer as it was at the checkpoint: tasks of later steps are made again, identically.
      buffer_note = restore_buffer(*ckpt / "buffer.db", db, *state);
      std::istringstream(state->data_rng) >> data_rng;
    } else {
      for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db.string() + suffix);
    }
    buffer::Options bo;
    bo.capacity_per_type = cfg.buffer.capacity_per_type;
    bo.policy = cfg.buffer.policy == "keep-oldest" ? buffer::CapacityPolicy::KeepOldest : buffer::CapacityPolicy::EvictOldest;
    bo.rollout_retention_steps = cfg.buffer.rollout_retention_steps;
    // A restored buffer's task counts were checked against the checkpoint before it replaced
    // buffer.db (restore_buffer).
    buf.emplace(buffer::TaskBuffer::open(db.string(), buffer::TaskBuffer::Mode::ReadWrite, bo));
    // The resumed run's config (its run.steps, --set overrides, run_dir) only now that the
    // checkpoint has loaded: a resume that fails leaves config.toml as it was.
    if (resuming) {
      TrainConfig saved = cfg;
      saved.algorithm.micro_batch_size = configured_micro_batch;  // a later resume plans again
      if (model_from_checkpoint) {
        saved.model.path = configured_model.path;
        saved.model.tokenizer = configured_model.tokenizer;
      }
      write_run_config(run_dir, saved);
    }
  }

  // ---- metrics sinks and console (rank 0) ---------------------------------------------------
  const int64_t first_step = state ? state->step + 1 : 1;
  std::vector<std::unique_ptr<MetricsSink>> sinks;
  std::unique_ptr<ConsoleView> console;
  MetricsTruncation metrics_cut;
  if (root) {
    const std::string metrics = (run_dir / "metrics.jsonl").string();
    if (state) {
      metrics_cut = truncate_metrics_jsonl(metrics, state->step);
      // The cut is a rename in the run directory, which nothing else syncs before the next
      // checkpoint: a power cut could bring back the lines past the checkpoint, from a timeline
      // the resumed run no longer follows, beside that checkpoint's.
      sync_path(run_dir);
    } else
      fs::remove(metrics);
    sinks.push_back(std::make_unique<JsonlSink>(metrics));
    if (cfg.logging.tensorboard) {
      auto events = std::make_unique<TensorBoardSink>(run_dir.string());
      if (state) events->restart_at(first_step);  // metrics.jsonl is cut back; this cuts the events back
      sinks.push_back(std::move(events));
    }
    console = std::make_unique<ConsoleView>(first_step, cfg.run.steps,
                                            ConsoleView::resolve(cfg.logging.console, fileno(stderr)));
    log.attach(console.get());
  }
  log.begin_run();
  log(fmt::format("azr train: run dir {} | {} rank(s) ({}, {}) | {} threads/rank, {} sandbox workers/rank",
                  run_dir.string(), comm->size(), launch.launcher, comm->backend(),
                  cfg.run.threads > 0 ? cfg.run.threads : share, po.workers));
  if (library_messages) library_messages->run_begun();
  log(fmt::format("model: {} ({} parameters) on {}{}{}", cfg.model.preset.empty() ? cfg.model.path : cfg.model.preset,
                  policy.model().parameters().size(), backend.name, cfg.model.recompute ? ", recomputing activations" : "",
                  ckpt ? " from " + ckpt->string() + ckpt_checked : std::string()));
  if (const std::string bits = kernels::reproducibility_note(cfg.model.device); !bits.empty()) log(bits);
  // Resumed on another number of ranks: allowed (a run moved to a larger machine). A step's samples
  // do not depend on the ranks (step.h), but its gradients are summed in another order, so the run
  // does not repeat bit for bit what the run would have done.
  if (state && state->world_size != comm->size())
    log(fmt::format("resume: the checkpoint was written by {} rank(s), this run has {}: it goes on from it, but may "
                    "differ from a run that kept {}, at first in the last bits (the order of the gradient sums), "
                    "later more where a sample changes",
                    state->world_size, comm->size(), state->world_size));
  if (metrics_cut.unreadable > 0)
    log(fmt::format("warning: metrics.jsonl had {} line(s) that are not metrics (the first at line {}); "
                    "the resume dropped them", metrics_cut.unreadable, metrics_cut.first_unreadable_line));
  if (comm->size() > 1 && !backend.host_memory)
    log(nccl_gradients ? "gradients: summed by NCCL on the GPUs (run.gradient_allreduce = \"nccl\")"
                       : fmt::format("gradients: summed through a host copy by the {} communicator", comm->backend()));
  if (!micro.note.empty()) log(micro.note);
  if (!data_dir_note.empty()) log(data_dir_note);
  if (!buffer_note.empty()) log(buffer_note);
  if (model_from_checkpoint)
    log(fmt::format("model.path {} is gone: the model's config and tokenizer are the checkpoint's ({})",
                    configured_model.path, model_from_checkpoint->string()));
  if (const std::string w = prompt_style_warning(cfg); !w.empty()) log(w);
  // RoPE runs past the trained context, but the model never learned there (as azr generate says).
  if (const int64_t context = policy.model().config().max_position_embeddings;
      context > 0 && cfg.algorithm.max_prompt_tokens + cfg.algorithm.max_response_tokens > context)
    log(fmt::format("warning: algorithm.max_prompt_tokens {} + algorithm.max_response_tokens {} pass the model's "
                    "max_position_embeddings ({}): positions past it are outside what the model was trained on",
                    cfg.algorithm.max_prompt_tokens, cfg.algorithm.max_response_tokens, context));

  // The stop rules' steps in a row (the loop below), carried by checkpoints across a resume.
  LostStepWatch lost_steps = state ? LostStepWatch(state->proposer_lost_in_a_row, state->solver_lost_in_a_row)
                                   : LostStepWatch();
  int not_finite_in_a_row = state ? state->not_finite_in_a_row : 0;
  auto write_ckpt = [&](int64_t step) -> std::string {
    std::string path;
    if (root) {
      TrainerState st;
      st.step = step;
      st.seed = cfg.run.seed;
      std::ostringstream rng;
      rng << data_rng;
      st.data_rng = rng.str();
      st.world_size = comm->size();
      const buffer::Counts c = buf->counts();
      for (int t = 0; t < 3; t++) st.buffer_tasks[t] = c.by_type[t];
      st.not_finite_in_a_row = not_finite_in_a_row;
      st.proposer_lost_in_a_row = lost_steps.proposer_in_a_row();
      st.solver_lost_in_a_row = lost_steps.solver_in_a_row();
      st.prompt_style = cfg.algorithm.prompt_style;
      for (const auto& sink : sinks) sink->sync();
      path = write_checkpoint(
                 run_dir, st,
                 [&](const fs::path& dir) {
                   try {
                     policy.model().save_pretrained(dir);
                   } catch (const model::NotFiniteWeights& e) {
                     throw std::runtime_error(fmt::format("step {}: no checkpoint written: {}", st.step, e.what()));
                   }
                   write_synced(dir / "tokenizer.json", tokenizer_file);
                   policy.optimizer().save(dir / "optimizer.safetensors");
                   buf->snapshot_to((dir / "buffer.db").string());
                 },
                 cfg.checkpoint.keep_last)
                 .string();
      log("checkpoint " + path);
    }
    comm->barrier();
    return path;
  };

  // ---- seeding (a new run): the buffer grows from the identity seed, no updates -------------
  model::SamplingParams sampling = model::sampling_defaults(policy.model(), policy.tokenizer(), true);
  sampling.temperature = float(cfg.algorithm.temperature);
  sampling.top_p = float(cfg.algorithm.top_p);
  sampling.top_k = cfg.algorithm.top_k;
  sampling.max_new_tokens = cfg.algorithm.max_response_tokens;
  if (!state) {
    bool seeding_stopped = false;
    if (root && !cfg.seeding.import_tasks.empty()) {
      std::vector<buffer::Task> tasks = std::move(imported);  // read and checked before the run began
      // An export keeps each task's step in its source run; here the tasks are seeds (step 0),
      // or tasks exported at step 40 would count as this run's newest for 40 steps and take
      // every solver slot from its own proposals (the reference drops a loaded task whose
      // step is past the run's).
      for (buffer::Task& t : tasks) t.step = 0;
      const buffer::InsertResult inserted = buf->insert(tasks);
      log(fmt::format("seeding: imported {} tasks from {} ({} duplicates)", inserted.inserted,
                      cfg.seeding.import_tasks, inserted.duplicates));
      if (!imported_ignored.empty())
        log("seeding: ignored field(s) of " + cfg.seeding.import_tasks +
            " that are not in the task format: " + imported_ignored);
    }
    if (root) {
      if (console) console->phase("seeding the buffer");
      proposer::SeedingSettings ss;
      ss.target = cfg.seeding.target;
      ss.batch = cfg.seeding.batch;
      ss.k = cfg.algorithm.k_references;
      ss.prompt_style = prompt_style(cfg);
      ss.max_rounds = cfg.seeding.max_rounds;
      ss.seed = derive_seed(cfg.run.seed, {uint64_t(SeedPhase::Seeding)});
      ss.parse.num_inputs = cfg.algorithm.induction_inputs;
      ss.validate.limits = sandbox_limits(cfg);
      ss.validate.max_output_chars = size_t(cfg.sandbox.max_output_chars);
      ss.validate.induction_inputs = size_t(cfg.algorithm.induction_inputs);
      uint64_t call = 0;
      int64_t too_long = 0;  // prompts past algorithm.max_prompt_tokens: "" is rejected as no_answer
      auto generate = [&](const std::vector<std::string>& prompts) {
        std::vector<std::string> out(prompts.size());
        std::vector<std::vector<int32_t>> ids;
        std::vector<uint64_t> seeds;
        std::vector<size_t> at;
        for (size_t i = 0; i < prompts.size(); i++) {
          std::vector<int32_t> p = policy.encode(prompts[i]);
          if (int64_t(p.size()) > cfg.algorithm.max_prompt_tokens) {
            too_long++;
            continue;
          }
          ids.push_back(std::move(p));
          seeds.push_back(derive_seed(cfg.run.seed, {0, uint64_t(SeedPhase::Seeding), call, i}));
          at.push_back(i);
        }
        call++;
        std::vector<model::Completion> c = policy.generate(ids, seeds, sampling, cfg.algorithm.generation_batch_size);
        for (size_t k = 0; k < c.size(); k++) out[at[k]] = std::move(c[k].text);
        return out;
      };
      ss.stop = [] { return g_stop_signal.load() != 0; };
      const double t0 = unix_now();
      const proposer::SeedingReport rep = proposer::grow_seed_buffer(*buf, pool, generate, ss);
      seeding_stopped = rep.stopped;
      std::string rejected;
      for (const auto& [reason, n] : rep.rejected) rejected += fmt::format(" {}={}", reason, n);
      log(fmt::format("seeding: {} rounds, {} proposals, inserted {}/{}/{} (ded/abd/ind), {} duplicates, {:.1f}s{}{}",
                      rep.rounds, rep.proposals, rep.inserted[0], rep.inserted[1], rep.inserted[2], rep.duplicates,
                      unix_now() - t0, rep.reached_target ? "" : " (target not reached)",
                      rejected.empty() ? "" : " | rejected:" + rejected));
      if (too_long > 0)
        log(fmt::format("seeding: warning: {} of {} prompts passed algorithm.max_prompt_tokens ({}) and were not "
                        "generated for (counted as no_answer above)", too_long, rep.proposals,
                        cfg.algorithm.max_prompt_tokens));
    }
    // Stopped by a signal in seeding: no checkpoint yet, so the run directory goes (NewRunCleanup)
    // and the same command starts the run again. Every rank ends here alike.
    std::vector<double> halt{double(seeding_stopped)};
    comm->allreduce_sum(std::span<double>(halt));
    if (halt[0] > 0) {
      if (console) console->finish("");  // ends the progress line; the log's line follows on stderr
      log.attach(nullptr);
      log(fmt::format("stopped by a signal during seeding, before the run's first checkpoint: nothing was saved and "
                      "what the run wrote in {} is removed; run the same command again to start the run",
                      run_dir.string()));
      return 130;
    }
    write_ckpt(0);
  }
  if (cleanup) cleanup->keep();  // the run has a checkpoint: from here on, --resume continues it

  // ---- evaluation (rank 0): benchmarks and held-out tasks loaded before the run dir (above) ----
  if (!eval_off.empty()) log("eval: off (" + eval_off + ")");
  if (!heldout_off.empty()) log("eval: no held-out accuracy (eval.heldout_tasks: " + heldout_off + ")");
  std::vector<std::string> eval_lines;
  auto run_eval = [&](int64_t step, Scalars& metrics) {
    if (!root || (benches.empty() && heldout.empty())) return;
    if (console) console->phase("evaluating");
    const eval::ModelEvalSettings es = model_eval_settings(cfg);
    const sandbox::Limits lim = sandbox_limits(cfg);
    const double t0 = unix_now();
    eval_lines.clear();
    std::string line = fmt::format("eval at step {}:", step);
    if (!heldout.empty()) {
      const eval::TaskEvalResult h =
          eval::evaluate_solver(policy.model(), policy.tokenizer(), heldout, pool, task_eval_settings(cfg));
      std::string acc;
      for (int t = 0; t < 3; t++) {
        const std::string tn = buffer::type_name(buffer::TaskType(t));
        metrics.emplace_back("heldout/accuracy/" + tn, h.accuracy(t));
        metrics.emplace_back("heldout/format_ok/" + tn, h.format_rate(t));
        acc += fmt::format(" {} {:.1f}%", tn, 100 * h.accuracy(t));
      }
      line += " held-out" + acc;
      eval_lines.push_back(fmt::format("held-out   {} (step {})", acc.substr(1), step));
    }
    const eval::Summary s = benches.empty()
                                ? eval::Summary{}
                                : eval::evaluate_model(policy.model(), policy.tokenizer(), benches, pool, lim, es);
    for (const eval::BenchScore& b : s.benches) {
      metrics.emplace_back("eval/" + b.name + "/pass@1", b.pass1);
      line += fmt::format(" {} {:.1f}% ({} items)", b.name, 100 * b.pass1, b.items);
      eval_lines.push_back(fmt::format("{:<11} {:.1f}% pass@1 on {} items (step {})", b.name, 100 * b.pass1, b.items, step));
    }
    metrics.emplace_back("time/eval_s", unix_now() - t0);
    log(line);
  };

  // ---- the loop ----------------------------------------------------------------------------
  const bool check_replicas = cfg.run.check_replicas;
  StepContext ctx{cfg, policy, pool, *comm, root ? &*buf : nullptr, root ? &data_rng : nullptr, {}};
  if (console) ctx.phase = [&](const std::string& p) { console->phase(p); };
  Scalars last;
  std::string last_ckpt;
  int64_t step = first_step - 1;
  const double t_run = unix_now();
  bool stopped = false;
  // The step-0 row is written after checkpoint 0, so a run killed during that first evaluation
  // resumes from step 0 with no line at all: the resume evaluates again (same weights, same seeds).
  const bool step0_row_missing = !state || (state->step == 0 && metrics_cut.lines_kept == 0);
  if (step0_row_missing && cfg.eval.at_start && cfg.eval.every > 0) {
    Scalars metrics;
    run_eval(0, metrics);
    if (root && !metrics.empty())
      for (auto& sink : sinks) sink->write(0, unix_now(), metrics);
  }
  // A signal before the first step (while a checkpoint loaded, or in the step-0 evaluation): the
  // run stops where it is, with the checkpoint it has, rather than after one more step.
  std::vector<double> early{double(g_stop_signal.load() != 0)};
  comm->allreduce_sum(std::span<double>(early));
  if (early[0] > 0) {
    stopped = true;
    log(fmt::format("stopped by a signal before step {}; resume with: azr train --resume {}", first_step,
                    run_dir.string()));
  }
  for (int64_t s = first_step; s <= cfg.run.steps && !stopped; s++) {
    std::optional<kernels::OpProfile> profile;
    if (s == cfg.run.profile_step) profile.emplace();
    StepResult r = run_step(ctx, s);
    step = s;
    if (profile)
      log(write_op_profile(run_dir, s, comm->rank(), device_ops.name, profile->take(), r.times.total));
    profile.reset();
    Scalars metrics = step_metrics(r, cfg, policy.optimizer().settings().lr);
    // Masked, so the run goes on; said in the log, and a run whose sandbox lost everything for
    // LostStepWatch::kStopAfter steps in a row stops after this one's checkpoint.
    const SandboxLosses losses = sandbox_losses(r);
    if (losses.lost() > 0)
      log(fmt::format("step {}: the sandbox lost {} of {} result(s) (internal_error), masked out of the update", s,
                      losses.lost(), losses.asked()));
    const bool sandbox_down = lost_steps.must_stop(losses);
    if (const PromptsTooLong n = prompts_too_long(r); n.proposer + n.solver > 0)
      log(fmt::format("step {}: {} proposer and {} solver prompt(s) passed algorithm.max_prompt_tokens ({}): not "
                      "generated for, left out of the update",
                      s, n.proposer, n.solver, cfg.algorithm.max_prompt_tokens));
    // A gradient that is not finite skips its update (Policy::update); one such step is an
    // overflow to live with, kStopAfter in a row mean the run cannot learn (the weights hold NaN,
    // say) and it stops, the weights as the last finite update left them.
    not_finite_in_a_row = r.update.skipped_not_finite ? not_finite_in_a_row + 1 : 0;
    if (r.update.skipped_not_finite)
      log(fmt::format("step {}: the gradient is not finite (norm {}): the update was skipped, the weights are as they "
                      "were", s, r.update.grad_norm));
    const bool not_learning = not_finite_in_a_row >= LostStepWatch::kStopAfter;
    if (check_replicas) {
      // Every rank's weights, bit for bit (the MPI equality test turns this on).
      std::vector<float> copy;
      const model::Transformer& model = policy.model();
      const uint64_t h = weights_hash(kernels::host_view(model.ops(), model.parameters(), copy));
      const std::vector<std::string> all = comm->allgather(std::to_string(h));
      for (size_t k = 1; k < all.size(); k++)
        if (all[k] != all[0])
          throw std::runtime_error(fmt::format("step {}: rank {} holds different weights from rank 0", s, k));
      metrics.emplace_back("replicas/identical", 1.0);
    }
    if (cfg.eval.every > 0 && s % cfg.eval.every == 0) run_eval(s, metrics);
    if (root) {
      const double wall = unix_now();
      for (auto& sink : sinks) sink->write(s, wall, metrics);
      const bool show = console->mode() != ConsoleView::Mode::Plain || s % cfg.logging.print_every == 0 ||
                        s == cfg.run.steps;
      if (show)
        console->step_done(s, metrics,
                         {{"valid", "proposer/valid_rate"},
                          {"learn", "proposer/learnability"},
                          {"solve", "solver/accuracy"},
                          {"loss", "loss/total"},
                          {"tok/s", "perf/generate_tokens_per_s"}});
    }
    last = std::move(metrics);
    // Stop together: any rank's signal stops every rank after this step.
    std::vector<double> stop{double(g_stop_signal.load() != 0)};
    comm->allreduce_sum(std::span<double>(stop));
    stopped = stop[0] > 0;
    const bool periodic = cfg.checkpoint.every > 0 && s % cfg.checkpoint.every == 0;
    if (periodic || stopped || sandbox_down || not_learning || s == cfg.run.steps) last_ckpt = write_ckpt(s);
    if (not_learning)
      throw std::runtime_error(fmt::format(
          "step {}: the gradient was not finite in {} steps in a row, so no update was made; the run stops. Look "
          "for NaN or infinite weights in the model it started from, or a learning rate that overflowed them",
          s, LostStepWatch::kStopAfter));
    if (sandbox_down)
      throw std::runtime_error(fmt::format(
          "step {}: the sandbox lost every result the proposer or the solver asked for in {} steps in a row (the log "
          "says why: a worker that cannot start, say); the run stops rather than train on nothing. Resume it once "
          "the sandbox runs: azr train --resume {}",
          s, LostStepWatch::kStopAfter, run_dir.string()));
    if (stopped) {
      log(fmt::format("stopped by a signal after step {}; resume with: azr train --resume {}", s, run_dir.string()));
      break;
    }
  }
  // A resume of a finished run restores its checkpoint (and writes a step-0 row it lacks) and
  // runs no step; it said "12 of 12 steps in 0s" and no more.
  if (first_step > cfg.run.steps && !stopped)
    log(fmt::format("the run had finished: its newest checkpoint is step {} and run.steps is {}; to go on, raise "
                    "run.steps (azr train --resume {} --set run.steps=N)",
                    first_step - 1, cfg.run.steps, run_dir.string()));
  if (root) console->finish(summary_text(last, step, cfg.run.steps, unix_now() - t_run, run_dir, last_ckpt, eval_lines));
  log.attach(nullptr);
  log.set_quiet(true);  // the summary said it on the console
  log(fmt::format("finished at step {}", step));
  return stopped ? 130 : 0;
}

}  // namespace

int train(const TrainOptions& opt) {
  // An error that ends the run (a disk that fails a checkpoint's write, a rank lost) was said on
  // the console alone: a run left in the background had a log.txt that just stopped.
  RunLog log;
  std::optional<RunDirLock> run_lock;
  struct CloseSignalLog {
    ~CloseSignalLog() {
      if (const int fd = g_log_fd.exchange(-1); fd >= 0) ::close(fd);
    }
  } close_signal_log;
  try {
    return run_training(opt, log, run_lock);
  } catch (const std::exception& e) {
    if (log.run_begun()) log.to_file(std::string("stopped by an error: ") + e.what());
    throw;
  }
}

}  // namespace azr::trainer
