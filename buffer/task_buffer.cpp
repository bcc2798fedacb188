#include "buffer/task_buffer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "buffer/schema.h"
#include "buffer/seeded_random.h"
#include "buffer/sqlite_util.h"
#include "buffer/task_row.h"

namespace azr::buffer {
namespace {

using sql::Stmt;

const char* kTypeNames[] = {"deduction", "abduction", "induction"};
const char* kOriginNames[] = {"seed", "proposed", "imported"};

// A task's `inputs` or `outputs` column: a JSON array of strings, as insert writes it. Anything
// else was written outside azr, and is refused: read as [] (export wrote "inputs": [], which
// import then refused) or with its non-strings dropped, an induction task changed meaning.
std::vector<std::string> json_strings(const std::string& text, int64_t id, const char* column) {
  std::vector<std::string> out;
  const auto j = nlohmann::json::parse(text, nullptr, false);
  const bool strings = j.is_array() && std::all_of(j.begin(), j.end(), [](const auto& v) { return v.is_string(); });
  if (!strings)
    throw BufferError("task " + std::to_string(id) + ": its " + column + " column is not a JSON array of strings (" +
                      (text.size() > 40 ? text.substr(0, 40) + "..." : text) + "); the buffer was altered outside azr");
  for (const auto& v : j) out.push_back(v.get<std::string>());
  return out;
}

// k distinct values from [0, n), in random order (Floyd's algorithm, then a shuffle).
std::vector<int64_t> distinct_below(std::mt19937_64& rng, int64_t n, int64_t k, const std::unordered_set<int64_t>& skip) {
  std::vector<int64_t> out;
  int64_t available = n - static_cast<int64_t>(skip.size());
  if (k >= available) {  // everything that is left
    for (int64_t i = 0; i < n; ++i)
      if (!skip.count(i)) out.push_back(i);
  } else if (skip.empty()) {
    std::unordered_set<int64_t> chosen;
    for (int64_t j = n - k; j < n; ++j) {
      auto t = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(j + 1)));
      if (!chosen.insert(t).second) chosen.insert(j);
    }
    out.assign(chosen.begin(), chosen.end());
    std::sort(out.begin(), out.end());
  } else {  // rejection against `skip` (used for the solver's top-up; skip is small)
    std::unordered_set<int64_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < k) {
      auto t = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(n)));
      if (!skip.count(t)) chosen.insert(t);
    }
    out.assign(chosen.begin(), chosen.end());
    std::sort(out.begin(), out.end());
  }
  seeded_shuffle(out.begin(), out.end(), rng);
  return out;
}

int64_t type_count(sqlite3* db, TaskType type) {
  Stmt s(db, "SELECT max(slot) FROM tasks WHERE type = ?");
  s.bind(1, static_cast<int64_t>(type));
  s.step();
  return s.is_null(0) ? 0 : s.i64(0) + 1;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// Text is stored as text (and induction lists as JSON), so it must be UTF-8. Model output that
// is not never reaches the buffer as a half-inserted batch: the whole batch is refused first.
void check_text(const std::vector<Task>& tasks) {
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    auto bad = [&](const std::string& field) {
      throw BufferError("task " + std::to_string(i) + " of the batch: field '" + field + "' is not valid UTF-8");
    };
    if (!valid_utf8(t.program)) bad("program");
    if (!valid_utf8(t.input)) bad("input");
    if (!valid_utf8(t.output)) bad("output");
    if (!valid_utf8(t.message)) bad("message");
    if (!valid_utf8(t.proposer_sample)) bad("proposer_sample");
    for (size_t k = 0; k < t.inputs.size(); ++k)
      if (!valid_utf8(t.inputs[k])) bad("inputs[" + std::to_string(k) + "]");
    for (size_t k = 0; k < t.outputs.size(); ++k)
      if (!valid_utf8(t.outputs[k])) bad("outputs[" + std::to_string(k) + "]");
  }
}

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string normalise_program(const std::string& program) {
  std::string out;
  size_t i = 0;
  while (i <= program.size()) {
    size_t end = program.find('\n', i);
    if (end == std::string::npos) end = program.size();
    std::string line = program.substr(i, end - i);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.pop_back();
    size_t first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] != '#') out += line + '\n';
    i = end + 1;
  }
  return out;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// 128-bit FNV-1a over the normalised text: stable across builds and platforms, and at 10^6
// tasks the chance of any collision is ~10^-27.
__extension__ typedef unsigned __int128 u128;  // GCC/Clang; __extension__ keeps -Wpedantic quiet

std::string hash128(const std::string& text) {
  u128 h = (static_cast<u128>(0x6c62272e07bb0142ull) << 64) | 0x62b821756295c58dull;
  const u128 prime = (static_cast<u128>(0x0000000001000000ull) << 64) | 0x000000000000013Bull;
  for (unsigned char c : text) {
    h ^= c;
    h *= prime;
  }
  std::string out(16, '\0');
  for (int i = 0; i < 16; ++i) out[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint8_t>(h >> (8 * i)));
  return out;
}

[[noreturn]] void rethrow_as_buffer_error(const std::string& path, const sql::Error& e, double busy_timeout) {
  if (e.code == SQLITE_BUSY || e.code == SQLITE_LOCKED)
  {
    char waited[32];
    std::snprintf(waited, sizeof waited, "%g", busy_timeout);
    throw BufferError(path + ": database is locked by another writer (waited " + waited + " s)");
  }
  if (e.code == SQLITE_NOTADB) throw BufferError(path + ": not an SQLite database");
  if (e.code == SQLITE_CORRUPT) throw BufferError(path + ": database file is corrupt (" + e.what() + ")");
  if (e.code == SQLITE_READONLY) throw BufferError(path + ": database is read-only (" + e.what() + ")");
  throw BufferError(path + ": " + e.what());
}

// A file marked as a buffer of the latest schema whose tables were dropped or altered by hand:
// refused on open, where each command failed at its first statement on them ("prepare: no such
// table: tasks", exit 1) or `migrate` said the file was fine.
void refuse_an_altered_schema(sqlite3* db, const std::string& path) {
  if (const std::string diff = schema_difference(db); !diff.empty())
    throw BufferError(path + ": not a whole azr task buffer: its " + diff + " (altered outside azr?)");
}

// An absolute path as a file: URI's path part (RFC 3986: anything but unreserved characters and
// '/' percent-encoded, so '?', '#' and '%' in a name stay the name's).
std::string uri_path(const std::filesystem::path& absolute) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : absolute.string()) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// What a reader opens. A database in a directory this process cannot write (a read-only share)
// cannot be read as usual: WAL needs a -shm file beside it, and SQLite cannot make one. Without a
// -wal that holds anything (a writer has one while it is open and folds it into the file when it
// closes), the file holds every committed transaction, so it is opened as immutable. With one,
// its last transactions would be missed: said, with what to do. Beside the file SQLite opens: a
// symlink's target. Immutable takes no locks: should a writer with rights to that directory start
// meanwhile, a read that spans its checkpoint could see part of it (a read-only share has none).
std::string reader_name(const std::string& path, int* flags) {
  std::error_code ec;
  const std::filesystem::path file = std::filesystem::canonical(path, ec);
  if (ec) return path;  // SQLite's own open says what is wrong
  const std::string wal = file.string() + "-wal", shm = file.string() + "-shm";
  if (::faccessat(AT_FDCWD, file.parent_path().c_str(), W_OK, AT_EACCESS) == 0 || ::access(shm.c_str(), F_OK) == 0)
    return path;
  if (std::filesystem::file_size(wal, ec) > 0 && !ec)
    throw BufferError(path + ": cannot be read here: its directory cannot be written, and SQLite needs to make " +
                      shm + " to read its write-ahead log (" + wal + "); copy both files somewhere writable and " +
                      "read the copy");
  *flags |= SQLITE_OPEN_URI;
  return "file://" + uri_path(file) + "?immutable=1";
}

}  // namespace

Task read_task(const sql::Stmt& s) {
  Task t;
  t.id = s.i64(0);
  t.type = static_cast<TaskType>(s.i64(1));
  t.origin = static_cast<Origin>(s.i64(2));
  t.program = s.text(3);
  t.input = s.text(4);
  t.output = s.text(5);
  t.inputs = json_strings(s.text(6), t.id, "inputs");
  t.outputs = json_strings(s.text(7), t.id, "outputs");
  t.message = s.text(8);
  t.step = s.i64(9);
  t.proposer_sample = s.text(10);
  t.attempts = s.i64(11);
  t.successes = s.i64(12);
  t.learnability = s.opt_f64(13);
  t.times_referenced = s.i64(14);
  t.times_served = s.i64(15);
  return t;
}

const char* type_name(TaskType t) { return kTypeNames[static_cast<int>(t)]; }
const char* origin_name(Origin o) { return kOriginNames[static_cast<int>(o)]; }

std::optional<TaskType> parse_type(const std::string& s) {
  for (int i = 0; i < 3; ++i)
    if (s == kTypeNames[i]) return static_cast<TaskType>(i);
  return std::nullopt;
}

std::optional<Origin> parse_origin(const std::string& s) {
  for (int i = 0; i < 3; ++i)
    if (s == kOriginNames[i]) return static_cast<Origin>(i);
  return std::nullopt;
}

std::string fingerprint(const Task& t) {
  std::string key = normalise_program(t.program);
  key += '\x1f';
  if (t.type == TaskType::Induction) {
    for (const auto& in : t.inputs) key += trim(in) + '\x1e';
  } else {
    key += trim(t.input);
  }
  return hash128(key);
}

// The 64 low bits of the fingerprint, as the de-duplication key: an integer keeps the index half
// the size of a 16-byte blob (it is touched at random by every insert). At 10^6 tasks the chance
// that two different tasks share a key is ~3e-8.
int64_t fingerprint_key(const Task& t) {
  std::string fp = fingerprint(t);
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(fp[static_cast<size_t>(i)]);
  return static_cast<int64_t>(v);
}

// ---- checkpoints -------------------------------------------------------------------------

// SQLite's automatic checkpoint runs inside whichever commit pushes the log past its threshold,
// so about one insert in thirty paid ~20 ms for copying the log into the database (measured at
// 10^6 tasks). The writer connection's automatic checkpoints are off; this thread, with its own
// connection, runs a PASSIVE checkpoint (never blocks the writer or readers) whenever the log
// grows past the threshold, as reported by the writer's WAL hook.
class TaskBuffer::Checkpointer {
 public:
  static constexpr int kThresholdFrames = 1000;  // SQLite's own default for auto-checkpoints

  Checkpointer(const std::string& path, sqlite3* writer) : writer_(writer) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
      sqlite3_close_v2(db_);
      db_ = nullptr;
      return;  // the writer keeps SQLite's automatic checkpoints
    }
    sqlite3_busy_timeout(db_, 1000);
    sqlite3_wal_autocheckpoint(writer_, 0);
    sqlite3_wal_hook(writer_, &Checkpointer::on_commit, this);
    thread_ = std::thread([this] { loop(); });
  }
  ~Checkpointer() {
    if (!db_) return;
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
    sqlite3_wal_hook(writer_, nullptr, nullptr);
    sqlite3_wal_autocheckpoint(writer_, kThresholdFrames);
    sqlite3_close_v2(db_);
  }
  int checkpoint_now() {
    int log = 0, done = 0;
    sqlite3_wal_checkpoint_v2(db_ ? db_ : writer_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    return log - done;
  }

 private:
  static int on_commit(void* self, sqlite3*, const char*, int frames) {
    auto* c = static_cast<Checkpointer*>(self);
    if (frames >= kThresholdFrames) {
      {
        std::lock_guard lk(c->mu_);
        c->wanted_ = true;
      }
      c->cv_.notify_one();
    }
    return SQLITE_OK;
  }
  void loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || wanted_; });
      if (stop_) return;
      wanted_ = false;
      lk.unlock();
      checkpoint_now();
      lk.lock();
    }
  }
  sqlite3* writer_;
  sqlite3* db_ = nullptr;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false;
  bool stop_ = false;
};

void TaskBuffer::snapshot_to(const std::string& dest) const {
  // The online backup API copies the database page by page inside one read transaction, so the
  // copy is a consistent state even while the checkpointer thread works; pages (and with them
  // every slot number sampling depends on) are copied exactly.
  sqlite3* out = nullptr;
  int rc = sqlite3_open_v2(dest.c_str(), &out, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = out ? sqlite3_errmsg(out) : sqlite3_errstr(rc);
    sqlite3_close(out);
    throw BufferError(dest + ": cannot create the buffer snapshot: " + msg);
  }
  sqlite3_backup* b = sqlite3_backup_init(out, "main", db_, "main");
  if (!b) {
    std::string msg = sqlite3_errmsg(out);
    sqlite3_close(out);
    throw BufferError(dest + ": cannot start the buffer snapshot: " + msg);
  }
  rc = sqlite3_backup_step(b, -1);
  sqlite3_backup_finish(b);
  if (rc != SQLITE_DONE) {
    std::string msg = sqlite3_errstr(rc);
    sqlite3_close(out);
    throw BufferError(dest + ": buffer snapshot failed: " + msg);
  }
  // A self-contained file: no -wal beside it, so it can be copied back as is.
  sqlite3_exec(out, "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr);
  sqlite3_close(out);
}

// ---- lifetime ----------------------------------------------------------------------------

TaskBuffer TaskBuffer::open(const std::string& path, Mode mode, Options options) {
  TaskBuffer b;
  b.path_ = path;
  b.options_ = options;
  b.read_only_ = mode == Mode::ReadOnly;
  struct stat st;
  bool exists = ::stat(path.c_str(), &st) == 0;
  if (!exists && mode != Mode::ReadWrite) throw BufferError(path + ": no such file");
  if (exists && S_ISDIR(st.st_mode)) throw BufferError(path + ": is a directory, not a database file");
  int flags = b.read_only_ ? SQLITE_OPEN_READONLY
              : mode == Mode::ReadWrite ? (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
                                        : SQLITE_OPEN_READWRITE;
  const std::string name = b.read_only_ ? reader_name(path, &flags) : path;
  int rc = sqlite3_open_v2(name.c_str(), &b.db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = b.db_ ? sqlite3_errmsg(b.db_) : sqlite3_errstr(rc);
    throw BufferError(path + ": cannot open (" + msg + ")");
  }
  sqlite3_busy_timeout(b.db_, static_cast<int>(options.busy_timeout_seconds * 1000));
  try {
    // The de-duplication index is keyed by a hash, so inserts touch it at random: at 10^6 tasks
    // (~650 MB) SQLite's default 8 MB page cache turns most touches into pread calls. A 64 MB
    // cache plus memory-mapped reads keep a batch of 64 in the low milliseconds.
    sql::exec(b.db_, "PRAGMA cache_size = -65536");
    sql::exec(b.db_, "PRAGMA mmap_size = 1073741824");
    // What the file is, read in one snapshot (each statement finished before the next: an
    // active statement would hold the transaction open past the WAL switch below).
    struct Header {
      int version;
      int64_t app;
      bool empty;
    };
    auto read_header = [&] {
      auto single_int = [&](const char* q) {
        Stmt st(b.db_, q);
        st.step();
        return st.i64(0);
      };
      Header h;
      h.version = static_cast<int>(single_int("PRAGMA user_version"));  // fails here if not a database
      h.app = single_int("PRAGMA application_id");
      h.empty = single_int("SELECT count(*) FROM sqlite_schema") == 0;
      return h;
    };
    auto refuse = [&](const Header& h) {
      // Another program's mark is refused even on a file without tables yet: an application id
      // or schema version is its claim on the file (only 0, SQLite's default, is no claim).
      if ((!h.empty || h.app != 0) && h.app != kApplicationId)
        throw BufferError(path + ": an SQLite database, but not an azr task buffer");
      if (h.empty && h.app == 0 && h.version != 0)
        throw BufferError(path + ": an SQLite database with user_version " + std::to_string(h.version) +
                          " and no tables, not an azr task buffer");
      if (h.version > kLatestSchemaVersion)
        throw BufferError(path + ": written by a newer azr (buffer schema " + std::to_string(h.version) +
                          "; this build reads up to " + std::to_string(kLatestSchemaVersion) + ")");
    };
    Header h;
    {
      sql::ReadTransaction snapshot(b.db_);
      h = read_header();
    }
    refuse(h);  // before anything below could modify another program's file
    // An empty file (0 bytes, or SQLite without tables) holds no buffer to migrate.
    if (h.empty && mode == Mode::ReadWriteExisting) throw BufferError(path + ": empty file, not an azr task buffer");
    if (options.quick_check) {
      Stmt check(b.db_, "PRAGMA quick_check(1)");  // one row: "ok" or the first problem found
      std::string first = check.step() ? check.text(0) : "no result";
      // "*** in database main ***\nPage 23: ...": keep the problem, on the message's one line.
      if (first.rfind("*** ", 0) == 0 && first.find('\n') != std::string::npos) first.erase(0, first.find('\n') + 1);
      std::replace(first.begin(), first.end(), '\n', ' ');
      if (first != "ok") throw BufferError(path + ": database file is corrupt (quick_check: " + first + ")");
    }
    if (b.read_only_) {
      if (h.empty) throw BufferError(path + ": empty file, not an azr task buffer");
      if (h.version < kLatestSchemaVersion)
        throw BufferError(path + ": buffer schema " + std::to_string(h.version) +
                          " needs migrating; open it once read-write (for example `azr buffer migrate`)");
      refuse_an_altered_schema(b.db_, path);
      sql::exec(b.db_, "PRAGMA query_only = 1");
      return b;
    }
    // WAL: readers never block the writer nor see a half-written batch. synchronous=NORMAL
    // keeps every committed transaction across a process crash (kill -9); only an OS crash or
    // power loss can drop the last few, never corrupt the file.
    // Migrate under the write lock, re-reading the header there: several processes may open a
    // new file at once, and only the first may create the schema. While they race, switching a
    // brand-new file into WAL can report BUSY without waiting (SQLite does not run the busy
    // handler for some journal-mode transitions), so the set-up is retried, with jitter, until
    // the caller's busy timeout is spent.
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::duration<double>(options.busy_timeout_seconds);
    std::mt19937_64 jitter(static_cast<uint64_t>(::getpid()));
    for (int attempt = 0;; ++attempt) {
      try {
        sql::exec(b.db_, "PRAGMA journal_mode = WAL");
        sql::exec(b.db_, "PRAGMA synchronous = NORMAL");
        sql::WriteTransaction tx(b.db_);
        h = read_header();
        refuse(h);
        for (int v2 = h.version; v2 < kLatestSchemaVersion; ++v2) {
          sql::exec(b.db_, kMigrations[v2].sql);
          sql::exec(b.db_, ("PRAGMA user_version = " + std::to_string(kMigrations[v2].to_version)).c_str());
          sql::exec(b.db_, ("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str());
        }
        tx.commit();
        break;
      } catch (const sql::Error& e) {
        bool busy = e.code == SQLITE_BUSY || e.code == SQLITE_LOCKED;
        if (!busy || std::chrono::steady_clock::now() >= give_up) throw;
        std::this_thread::sleep_for(std::chrono::microseconds(500 + uniform_below(jitter, 5000u << std::min(attempt, 4))));
      }
    }
    refuse_an_altered_schema(b.db_, path);
    b.checkpointer_ = std::make_unique<Checkpointer>(path, b.db_);
  } catch (const sql::Error& e) {
    rethrow_as_buffer_error(path, e, options.busy_timeout_seconds);
  }
  return b;
}

TaskBuffer::~TaskBuffer() {
  checkpointer_.reset();  // before the writer connection it hooks
  if (db_) sqlite3_close_v2(db_);
}

TaskBuffer::TaskBuffer(TaskBuffer&& o) noexcept
    : db_(o.db_),
      checkpointer_(std::move(o.checkpointer_)),
      path_(std::move(o.path_)),
      options_(o.options_),
      read_only_(o.read_only_) {
  o.db_ = nullptr;
}

TaskBuffer& TaskBuffer::operator=(TaskBuffer&& o) noexcept {
  if (this != &o) {
    checkpointer_.reset();
    if (db_) sqlite3_close_v2(db_);
    checkpointer_ = std::move(o.checkpointer_);
    db_ = o.db_;
    path_ = std::move(o.path_);
    options_ = o.options_;
    read_only_ = o.read_only_;
    o.db_ = nullptr;
  }
  return *this;
}

int TaskBuffer::schema_version() const {
  Stmt v(db_, "PRAGMA user_version");
  v.step();
  return static_cast<int>(v.i64(0));
}

// ---- writes ------------------------------------------------------------------------------

InsertResult TaskBuffer::insert(const std::vector<Task>& tasks) {
  check_text(tasks);
  InsertResult r;
  r.ids.assign(tasks.size(), 0);
  try {
    sql::WriteTransaction tx(db_);
    Stmt exists(db_, "SELECT 1 FROM tasks WHERE type = ? AND fingerprint = ?");
    Stmt ins(db_,
             "INSERT INTO tasks (type, slot, origin, program, input, output, inputs, outputs, message, step, "
             "proposer_sample, fingerprint, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
             "ON CONFLICT (type, fingerprint) DO NOTHING");
    Stmt oldest(db_, "SELECT id, slot FROM tasks WHERE type = ? ORDER BY id LIMIT 1");
    Stmt del(db_, "DELETE FROM tasks WHERE id = ?");
    Stmt move(db_, "UPDATE tasks SET slot = ? WHERE type = ? AND slot = ?");
    int64_t count[3] = {-1, -1, -1};
    // (step, type) -> inserted, duplicates, refused, evicted
    std::map<std::pair<int64_t, int>, std::array<int64_t, 4>> log;
    std::unordered_map<int64_t, size_t> index_of_id;  // this batch's inserted ids, while they may be evicted
    const double now = now_unix();
    const int64_t cap = options_.capacity_per_type;

    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      int ti = static_cast<int>(t.type);
      if (count[ti] < 0) count[ti] = type_count(db_, t.type);
      auto& entry = log[{t.step, ti}];
      int64_t fp = fingerprint_key(t);
      if (cap > 0 && options_.policy == CapacityPolicy::KeepOldest && count[ti] >= cap) {
        exists.bind(1, ti).bind(2, fp);
        bool dup = exists.step();
        exists.reset();
        ++(dup ? entry[1] : entry[2]);
        ++(dup ? r.duplicates : r.refused_full);
        continue;
      }
      ins.bind(1, ti).bind(2, count[ti]).bind(3, static_cast<int64_t>(t.origin)).bind(4, t.program);
      ins.bind(5, t.input).bind(6, t.output);
      ins.bind(7, nlohmann::json(t.inputs).dump()).bind(8, nlohmann::json(t.outputs).dump());
      ins.bind(9, t.message).bind(10, t.step).bind(11, t.proposer_sample).bind(12, fp).bind(13, now);
      ins.run();
      if (sqlite3_changes(db_) == 0) {
        ++entry[1];
        ++r.duplicates;
        continue;
      }
      r.ids[i] = sqlite3_last_insert_rowid(db_);
      if (cap > 0) index_of_id[r.ids[i]] = i;
      ++count[ti];
      ++entry[0];
      ++r.inserted;
      // Evict the oldest of this type while over capacity; keep slots dense by moving the
      // last slot into the hole.
      while (cap > 0 && count[ti] > cap) {
        oldest.bind(1, ti);
        oldest.step();
        int64_t id = oldest.i64(0), slot = oldest.i64(1);
        oldest.reset();
        del.bind(1, id).run();
        int64_t last = count[ti] - 1;
        if (slot != last) move.bind(1, slot).bind(2, ti).bind(3, last).run();
        --count[ti];
        ++entry[3];
        ++r.evicted;
        // Inserted and evicted within this very batch: looked up, not searched for (a search of
        // r.ids per eviction made an import of 100,000 tasks into a full buffer quadratic).
        if (auto at = index_of_id.find(id); at != index_of_id.end()) {
          r.ids[at->second] = 0;
          index_of_id.erase(at);
        }
      }
    }
    Stmt up(db_,
            "INSERT INTO insert_log (step, type, inserted, duplicates, refused, evicted) VALUES (?,?,?,?,?,?) "
            "ON CONFLICT (step, type) DO UPDATE SET inserted = inserted + excluded.inserted, "
            "duplicates = duplicates + excluded.duplicates, refused = refused + excluded.refused, "
            "evicted = evicted + excluded.evicted");
    for (const auto& [key, v] : log)
      up.bind(1, key.first).bind(2, key.second).bind(3, v[0]).bind(4, v[1]).bind(5, v[2]).bind(6, v[3]).run();
    tx.commit();
  } catch (const sql::Error& e) {
    rethrow_as_buffer_error(path_, e, options_.busy_timeout_seconds);
  }
  return r;
}

// Runs `body` as one write transaction; SQLite errors become the user-facing BufferError.
template <class Body>
static void write_transaction(sqlite3* db, const std::string& path, double busy_timeout, Body&& body) {
  try {
    sql::WriteTransaction tx(db);
    body();
    tx.commit();
  } catch (const sql::Error& e) {
    rethrow_as_buffer_error(path, e, busy_timeout);
  }
}

void TaskBuffer::record_attempts(int64_t task_id, int64_t n, int64_t k, bool is_estimate) {
  if (n < 0 || k < 0 || k > n) throw std::invalid_argument("record_attempts: need 0 <= k <= n");
  write_transaction(db_, path_, options_.busy_timeout_seconds, [&] {
    Stmt s(db_,
           "UPDATE tasks SET attempts = attempts + ?, successes = successes + ?, "
           "learnability = CASE WHEN ? THEN ? ELSE learnability END WHERE id = ?");
    s.bind(1, n).bind(2, k).bind(3, is_estimate ? 1 : 0);
    if (n > 0) s.bind(4, static_cast<double>(k) / static_cast<double>(n));
    else s.bind_null(4);
    s.bind(5, task_id).run();
  });
}

static void bump(sqlite3* db, const char* column, const std::vector<int64_t>& ids) {
  Stmt s(db, std::string("UPDATE tasks SET ") + column + " = " + column + " + 1 WHERE id = ?");
  for (int64_t id : ids) s.bind(1, id).run();
}

void TaskBuffer::mark_referenced(const std::vector<int64_t>& ids) {
  write_transaction(db_, path_, options_.busy_timeout_seconds, [&] { bump(db_, "times_referenced", ids); });
}

void TaskBuffer::mark_served(const std::vector<int64_t>& ids) {
  write_transaction(db_, path_, options_.busy_timeout_seconds, [&] { bump(db_, "times_served", ids); });
}

void TaskBuffer::add_rollouts(const std::vector<Rollout>& rollouts) {
  if (options_.rollout_retention_steps <= 0 || rollouts.empty()) return;
  write_transaction(db_, path_, options_.busy_timeout_seconds, [&] {
    Stmt s(db_,
           "INSERT INTO rollouts (step, role, type, task_id, response, reward, correct, format_ok) "
           "VALUES (?,?,?,?,?,?,?,?)");
    int64_t newest = 0;
    for (const auto& r : rollouts) {
      s.bind(1, r.step).bind(2, r.role).bind(3, static_cast<int64_t>(r.type));
      if (r.task_id) s.bind(4, *r.task_id);
      else s.bind_null(4);
      s.bind(5, r.response).bind(6, r.reward).bind(7, r.correct ? 1 : 0).bind(8, r.format_ok ? 1 : 0).run();
      newest = std::max(newest, r.step);
    }
    Stmt prune(db_, "DELETE FROM rollouts WHERE step <= ?");
    prune.bind(1, newest - options_.rollout_retention_steps).run();
  });
}

void TaskBuffer::set_meta(const std::string& key, const std::string& value) {
  write_transaction(db_, path_, options_.busy_timeout_seconds, [&] {
    Stmt s(db_, "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    s.bind(1, key).bind(2, value).run();
  });
}

// ---- reads -------------------------------------------------------------------------------

static std::vector<Task> tasks_at_slots(sqlite3* db, TaskType type, const std::vector<int64_t>& slots) {
  Stmt s(db, std::string("SELECT ") + kTaskColumns + " FROM tasks WHERE type = ? AND slot = ?");
  std::vector<Task> out;
  out.reserve(slots.size());
  for (int64_t slot : slots) {
    s.bind(1, static_cast<int64_t>(type)).bind(2, slot);
    if (s.step()) out.push_back(read_task(s));
    s.reset();
  }
  return out;
}

std::vector<Task> TaskBuffer::sample_references(TaskType type, int k, std::mt19937_64& rng) const {
  try {
    sql::ReadTransaction snapshot(db_);
    int64_t n = type_count(db_, type);
    if (n == 0 || k <= 0) return {};
    return tasks_at_slots(db_, type, distinct_below(rng, n, std::min<int64_t>(k, n), {}));
  } catch (const sql::Error& e) {
    rethrow_as_buffer_error(path_, e, options_.busy_timeout_seconds);
  }
}

std::vector<Task> TaskBuffer::sample_solver_batch(TaskType type, int batch, int64_t newest_since_step,
                                                  std::mt19937_64& rng) const {
  try {
    sql::ReadTransaction snapshot(db_);
    std::vector<Task> out;
    if (batch <= 0) return out;
    // The recent tasks, all of them when they fit, else `batch` of them uniformly (as the
    // reference's max_new strategy): at step 1 every seed is recent, and the newest `batch` ids
    // would serve the same last-inserted seeds in every run.
    Stmt s(db_, "SELECT id, slot FROM tasks WHERE type = ? AND step >= ? ORDER BY id DESC");
    s.bind(1, static_cast<int64_t>(type)).bind(2, newest_since_step);
    std::vector<std::pair<int64_t, int64_t>> recent;  // (id, slot), newest first
    while (s.step()) recent.emplace_back(s.i64(0), s.i64(1));
    if (static_cast<int64_t>(recent.size()) > batch) {
      std::vector<std::pair<int64_t, int64_t>> drawn;
      for (int64_t i : distinct_below(rng, static_cast<int64_t>(recent.size()), batch, {}))
        drawn.push_back(recent[size_t(i)]);
      std::sort(drawn.begin(), drawn.end(), std::greater<>());
      recent = std::move(drawn);
    }
    std::vector<int64_t> slots;
    std::unordered_set<int64_t> taken;
    for (const auto& [id, slot] : recent) {
      slots.push_back(slot);
      taken.insert(slot);
    }
    out = tasks_at_slots(db_, type, slots);
    int64_t n = type_count(db_, type);
    int64_t want = std::min<int64_t>(batch - static_cast<int64_t>(out.size()), n - static_cast<int64_t>(taken.size()));
    if (want > 0)
      for (auto& t : tasks_at_slots(db_, type, distinct_below(rng, n, want, taken))) out.push_back(std::move(t));
    return out;
  } catch (const sql::Error& e) {
    rethrow_as_buffer_error(path_, e, options_.busy_timeout_seconds);
  }
}

std::optional<Task> TaskBuffer::get(int64_t id) const {
  try {
    Stmt s(db_, std::string("SELECT ") + kTaskColumns + " FROM tasks WHERE id = ?");
    s.bind(1, id);
    if (!s.step()) return std::nullopt;
    return read_task(s);
  } catch (const sql::Error& e) {
    rethrow_as_buffer_error(path_, e, options_.busy_timeout_seconds);
  }
}

Counts TaskBuffer::counts() const {
  Counts c;
  try {
    Stmt s(db_, "SELECT type, origin, count(*) FROM tasks GROUP BY type, origin");
    while (s.step()) {
      int t = static_cast<int>(s.i64(0)), o = static_cast<int>(s.i64(1));
      c.by_type_origin[t][o] = s.i64(2);
      c.by_type[t] += s.i64(2);
    }
  } catch (const sql::Error& e) {
    rethrow_as_buffer_error(path_, e, options_.busy_timeout_seconds);
  }
  return c;
}

std::optional<std::string> TaskBuffer::meta(const std::string& key) const {
  try {
    Stmt s(db_, "SELECT value FROM meta WHERE key = ?");
    s.bind(1, key);
    if (!s.step()) return std::nullopt;
    return s.text(0);
  } catch (const sql::Error& e) {
    rethrow_as_buffer_error(path_, e, options_.busy_timeout_seconds);
  }
}

std::vector<Rollout> TaskBuffer::rollouts_for_task(int64_t task_id) const {
  std::vector<Rollout> out;
  try {
    Stmt s(db_,
           "SELECT step, role, type, task_id, response, reward, correct, format_ok FROM rollouts WHERE task_id = ? "
           "ORDER BY id");
    s.bind(1, task_id);
    while (s.step()) {
      Rollout r;
      r.step = s.i64(0);
      r.role = s.text(1);
      r.type = static_cast<TaskType>(s.i64(2));
      if (!s.is_null(3)) r.task_id = s.i64(3);
      r.response = s.text(4);
      r.reward = s.f64(5);
      r.correct = s.i64(6) != 0;
      r.format_ok = s.i64(7) != 0;
      out.push_back(std::move(r));
    }
  } catch (const sql::Error& e) {
    rethrow_as_buffer_error(path_, e, options_.busy_timeout_seconds);
  }
  return out;
}

}  // namespace azr::buffer
