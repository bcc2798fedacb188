#pragma once
// Read-only queries behind `azr buffer`: filtered listings and the statistics a researcher asks
// for ("what is my model proposing, and how hard is it?"). They run on a ReadOnly TaskBuffer,
// so they work next to a trainer that is writing the file.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "buffer/task_buffer.h"

namespace azr::buffer {

enum class SortKey { Id, Step, Learnability, SolveRate };

struct ListQuery {
  std::optional<TaskType> type;
  std::optional<Origin> origin;
  std::optional<int64_t> step_min, step_max;  // inclusive
  SortKey sort = SortKey::Id;
  bool descending = false;
  int64_t limit = 50;  // 0 = all
};

std::vector<Task> list_tasks(const TaskBuffer& b, const ListQuery& q);

// Ten equal bins over [0, 1] (the last bin includes 1.0) plus the tasks without a value.
struct Histogram {
  std::array<int64_t, 10> bins{};
  int64_t missing = 0;
  int64_t total() const;
};

struct StepGrowth {
  int64_t step = 0;
  int64_t inserted = 0, duplicates = 0, refused = 0, evicted = 0;
};

struct TypeStats {
  int64_t total = 0;
  std::array<int64_t, 3> by_origin{};
  Histogram learnability;  // last estimate per task
  Histogram solve_rate;    // successes / attempts, tasks with attempts > 0
  int64_t inserted = 0, duplicates = 0, refused = 0, evicted = 0;  // over the run
  double duplicate_rate() const;  // duplicates / (inserted + duplicates + refused)
  std::vector<StepGrowth> growth;  // per step, ascending
};

struct Stats {
  std::array<TypeStats, 3> types;
  int schema_version = 0;
  std::vector<std::pair<std::string, std::string>> meta;
};

Stats compute_stats(const TaskBuffer& b);

}  // namespace azr::buffer
