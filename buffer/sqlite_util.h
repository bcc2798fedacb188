#pragma once
// A thin RAII layer over the sqlite3 C API: prepared statements with bind/step/column helpers,
// and one error type carrying SQLite's own message. Nothing here knows about tasks.
#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace azr::buffer::sql {

struct Error : std::runtime_error {
  int code;
  Error(int c, const std::string& msg) : std::runtime_error(msg), code(c) {}
};

inline void check(sqlite3* db, int rc, std::string_view what) {
  if (rc != SQLITE_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
    throw Error(rc, std::string(what) + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
}

inline void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw Error(rc, msg);
  }
}

class Stmt {
 public:
  Stmt(sqlite3* db, std::string_view sql) : db_(db) {
    check(db, sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &s_, nullptr), "prepare");
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, int64_t v) { return ok(sqlite3_bind_int64(s_, i, v)); }
  Stmt& bind(int i, int v) { return ok(sqlite3_bind_int64(s_, i, v)); }
  Stmt& bind(int i, double v) { return ok(sqlite3_bind_double(s_, i, v)); }
  Stmt& bind(int i, std::string_view v) {
    return ok(sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Stmt& bind_blob(int i, std::string_view v) {
    return ok(sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Stmt& bind(int i, std::optional<double> v) { return v ? bind(i, *v) : ok(sqlite3_bind_null(s_, i)); }
  Stmt& bind_null(int i) { return ok(sqlite3_bind_null(s_, i)); }

  // True while a row is available.
  bool step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error(rc, std::string("step: ") + sqlite3_errmsg(db_));
  }
  void run() {
    while (step()) {
    }
    reset();
  }
  void reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }

  int64_t i64(int col) const { return sqlite3_column_int64(s_, col); }
  double f64(int col) const { return sqlite3_column_double(s_, col); }
  bool is_null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
  std::optional<double> opt_f64(int col) const { return is_null(col) ? std::nullopt : std::optional(f64(col)); }
  std::string text(int col) const {
    const unsigned char* p = sqlite3_column_text(s_, col);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s_, col)))
             : std::string();
  }

 private:
  Stmt& ok(int rc) {
    check(db_, rc, "bind");
    return *this;
  }
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back if the scope exits by exception. IMMEDIATE takes the
// write lock up front, so two writers wait (busy_timeout) instead of deadlocking mid-way.
class WriteTransaction {
 public:
  explicit WriteTransaction(sqlite3* db) : db_(db) { exec(db_, "BEGIN IMMEDIATE"); }
  ~WriteTransaction() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    exec(db_, "COMMIT");
    done_ = true;
  }

 private:
  sqlite3* db_;
  bool done_ = false;
};

// A consistent snapshot for multi-statement reads.
class ReadTransaction {
 public:
  explicit ReadTransaction(sqlite3* db) : db_(db) { exec(db_, "BEGIN"); }
  ~ReadTransaction() { sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr); }

 private:
  sqlite3* db_;
};

}  // namespace azr::buffer::sql
