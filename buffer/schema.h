#pragma once
// The buffer's schema and its forward migrations. `PRAGMA user_version` records the version a
// file is at; opening it read-write applies every later migration, each in its own
// transaction. A migration, once released, is never edited: a change is a new entry.
#include <sqlite3.h>

#include <cstdint>
#include <string>

namespace azr::buffer {

// 'azrb': marks a file as an azr task buffer, so another SQLite database is never mistaken for
// one (and never migrated).
constexpr int32_t kApplicationId = 0x617a7262;

struct Migration {
  int to_version;
  const char* sql;
};

// Index i migrates from version i to version i + 1.
extern const Migration kMigrations[];
extern const int kLatestSchemaVersion;

// "" if `db`, at kLatestSchemaVersion, holds every table and index of that schema, each table
// with its columns (names and declared types, in order); else the first that is missing or
// differs. A file whose version says "buffer" but whose tables were dropped or altered by hand
// failed later, statement by statement ("prepare: no such table: tasks"), or read as empty.
std::string schema_difference(sqlite3* db);

}  // namespace azr::buffer
