#include "buffer/queries.h"

#include <algorithm>

#include "buffer/sqlite_util.h"
#include "buffer/task_row.h"

namespace azr::buffer {
namespace {

using sql::Stmt;

void add_to(Histogram& h, std::optional<double> v) {
  if (!v) {
    ++h.missing;
    return;
  }
  int bin = static_cast<int>(*v * 10);
  h.bins[static_cast<size_t>(std::clamp(bin, 0, 9))]++;
}

}  // namespace

int64_t Histogram::total() const {
  int64_t n = missing;
  for (auto c : bins) n += c;
  return n;
}

double TypeStats::duplicate_rate() const {
  int64_t offered = inserted + duplicates + refused;
  return offered ? static_cast<double>(duplicates) / static_cast<double>(offered) : 0.0;
}

std::vector<Task> list_tasks(const TaskBuffer& b, const ListQuery& q) {
  std::string sql = std::string("SELECT ") + kTaskColumns + " FROM tasks WHERE 1";
  if (q.type) sql += " AND type = " + std::to_string(static_cast<int>(*q.type));
  if (q.origin) sql += " AND origin = " + std::to_string(static_cast<int>(*q.origin));
  if (q.step_min) sql += " AND step >= " + std::to_string(*q.step_min);
  if (q.step_max) sql += " AND step <= " + std::to_string(*q.step_max);
  const char* dir = q.descending ? " DESC" : " ASC";
  switch (q.sort) {
    case SortKey::Id: sql += std::string(" ORDER BY id") + dir; break;
    case SortKey::Step: sql += std::string(" ORDER BY step") + dir + ", id" + dir; break;
    case SortKey::Learnability:  // tasks never estimated go last either way
      sql += std::string(" ORDER BY learnability IS NULL, learnability") + dir + ", id"; break;
    case SortKey::SolveRate:
      sql += std::string(" ORDER BY attempts = 0, CAST(successes AS REAL) / MAX(attempts, 1)") + dir + ", id"; break;
  }
  if (q.limit > 0) sql += " LIMIT " + std::to_string(q.limit);
  std::vector<Task> out;
  try {
    Stmt s(b.handle(), sql);
    while (s.step()) out.push_back(read_task(s));
  } catch (const sql::Error& e) {
    throw BufferError(b.path() + ": " + e.what());
  }
  return out;
}

Stats compute_stats(const TaskBuffer& b) {
  Stats st;
  try {
    sql::ReadTransaction snapshot(b.handle());
    st.schema_version = b.schema_version();
    Stmt s(b.handle(), "SELECT type, origin, learnability, attempts, successes FROM tasks");
    while (s.step()) {
      TypeStats& t = st.types[static_cast<size_t>(s.i64(0))];
      ++t.total;
      ++t.by_origin[static_cast<size_t>(s.i64(1))];
      add_to(t.learnability, s.opt_f64(2));
      int64_t attempts = s.i64(3);
      add_to(t.solve_rate, attempts > 0 ? std::optional(static_cast<double>(s.i64(4)) / static_cast<double>(attempts))
                                        : std::nullopt);
    }
    Stmt g(b.handle(), "SELECT step, type, inserted, duplicates, refused, evicted FROM insert_log ORDER BY step, type");
    while (g.step()) {
      TypeStats& t = st.types[static_cast<size_t>(g.i64(1))];
      StepGrowth row{g.i64(0), g.i64(2), g.i64(3), g.i64(4), g.i64(5)};
      t.inserted += row.inserted;
      t.duplicates += row.duplicates;
      t.refused += row.refused;
      t.evicted += row.evicted;
      t.growth.push_back(row);
    }
    Stmt m(b.handle(), "SELECT key, value FROM meta ORDER BY key");
    while (m.step()) st.meta.emplace_back(m.text(0), m.text(1));
  } catch (const sql::Error& e) {
    throw BufferError(b.path() + ": " + e.what());
  }
  return st;
}

}  // namespace azr::buffer
