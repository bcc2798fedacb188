#include "buffer/schema.h"

#include <map>
#include <vector>

#include "buffer/sqlite_util.h"

namespace azr::buffer {

const Migration kMigrations[] = {
    {1, R"SQL(
-- Tasks. `slot` numbers the tasks of one type densely (0..n-1) so uniform sampling is n
-- indexed look-ups; eviction moves the last slot into the hole. AUTOINCREMENT: an evicted
-- task's id is never reused, so a larger id always means a newer task.
CREATE TABLE tasks (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  type             INTEGER NOT NULL CHECK (type BETWEEN 0 AND 2),
  slot             INTEGER NOT NULL,
  origin           INTEGER NOT NULL CHECK (origin BETWEEN 0 AND 2),
  program          TEXT    NOT NULL,
  input            TEXT    NOT NULL DEFAULT '',
  output           TEXT    NOT NULL DEFAULT '',
  inputs           TEXT    NOT NULL DEFAULT '[]',  -- induction: JSON array of argument lists
  outputs          TEXT    NOT NULL DEFAULT '[]',  -- induction: JSON array of reprs
  message          TEXT    NOT NULL DEFAULT '',
  step             INTEGER NOT NULL,
  proposer_sample  TEXT    NOT NULL DEFAULT '',
  fingerprint      INTEGER NOT NULL,               -- 64-bit hash of the normalised task
  attempts         INTEGER NOT NULL DEFAULT 0,
  successes        INTEGER NOT NULL DEFAULT 0,
  learnability     REAL,
  times_referenced INTEGER NOT NULL DEFAULT 0,
  times_served     INTEGER NOT NULL DEFAULT 0,
  created_at       REAL    NOT NULL
);
CREATE UNIQUE INDEX tasks_type_slot ON tasks(type, slot);
CREATE UNIQUE INDEX tasks_type_fingerprint ON tasks(type, fingerprint);
CREATE INDEX tasks_type_id ON tasks(type, id);
CREATE INDEX tasks_type_step ON tasks(type, step);

-- What each step's inserts did, per type: growth and the duplicate rate come from here.
CREATE TABLE insert_log (
  step       INTEGER NOT NULL,
  type       INTEGER NOT NULL,
  inserted   INTEGER NOT NULL DEFAULT 0,
  duplicates INTEGER NOT NULL DEFAULT 0,
  refused    INTEGER NOT NULL DEFAULT 0,
  evicted    INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (step, type)
) WITHOUT ROWID;

-- Rollouts kept for inspection, pruned to the configured number of recent steps.
CREATE TABLE rollouts (
  id        INTEGER PRIMARY KEY,
  step      INTEGER NOT NULL,
  role      TEXT    NOT NULL,
  type      INTEGER NOT NULL,
  task_id   INTEGER,
  response  TEXT    NOT NULL,
  reward    REAL    NOT NULL,
  correct   INTEGER NOT NULL,
  format_ok INTEGER NOT NULL
);
CREATE INDEX rollouts_step ON rollouts(step);
CREATE INDEX rollouts_task ON rollouts(task_id);

-- Run metadata: config, start time, versions.
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
)SQL"},
};

const int kLatestSchemaVersion = 1;

namespace {

// Each table's and index's name, with its kind and, for a table, its columns as "name TYPE".
std::map<std::string, std::vector<std::string>> schema_of(sqlite3* db) {
  std::map<std::string, std::vector<std::string>> out;
  std::vector<std::pair<std::string, std::string>> objects;  // (kind, name)
  {
    sql::Stmt s(db, "SELECT type, name FROM sqlite_schema WHERE type IN ('table', 'index') AND name NOT LIKE "
                    "'sqlite_%'");
    while (s.step()) objects.emplace_back(s.text(0), s.text(1));
  }
  for (const auto& [kind, name] : objects) {
    std::vector<std::string>& shape = out[kind + " " + name];
    if (kind != "table") continue;
    sql::Stmt c(db, "SELECT name, type FROM pragma_table_info(?1)");
    c.bind(1, name);
    while (c.step()) shape.push_back(c.text(0) + " " + c.text(1));
  }
  return out;
}

// The latest schema's shape, from the migrations run on an in-memory database.
std::map<std::string, std::vector<std::string>> latest_schema() {
  sqlite3* expected = nullptr;
  if (sqlite3_open(":memory:", &expected) != SQLITE_OK) {
    sqlite3_close(expected);
    throw sql::Error(SQLITE_NOMEM, "cannot open an in-memory database");
  }
  std::map<std::string, std::vector<std::string>> want;
  try {
    for (int v = 0; v < kLatestSchemaVersion; ++v) sql::exec(expected, kMigrations[v].sql);
    want = schema_of(expected);
  } catch (...) {
    sqlite3_close(expected);
    throw;
  }
  sqlite3_close(expected);
  return want;
}

}  // namespace

std::string schema_difference(sqlite3* db) {
  // Made once a process: building it was most of the ~0.8 ms the check took on every open; the
  // check is 0.2-0.3 ms now (buffer_bench, bench/RESULTS.md).
  static const std::map<std::string, std::vector<std::string>> want = latest_schema();
  const std::map<std::string, std::vector<std::string>> have = schema_of(db);
  // Tables first: a dropped table takes its indexes with it, and is the one to name.
  for (const bool tables : {true, false}) {
    for (const auto& [object, columns] : want) {
      if (object.starts_with("table ") != tables) continue;
      const auto it = have.find(object);
      if (it == have.end()) return object + " is missing";
      for (size_t i = 0; i < columns.size(); ++i)
        if (i >= it->second.size() || it->second[i] != columns[i])
          return object + ": column " + std::to_string(i + 1) + " is " +
                 (i < it->second.size() ? "'" + it->second[i] + "'" : "missing") + ", where the schema has '" +
                 columns[i] + "'";
    }
  }
  return "";
}

}  // namespace azr::buffer
