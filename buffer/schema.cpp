#include "buffer/schema.h"

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

}  // namespace azr::buffer
