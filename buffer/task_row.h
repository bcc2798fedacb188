#pragma once
// How a task row is read: the column list and the reader that match it. Shared by the buffer's
// operations and its queries so the two never disagree.
#include "buffer/sqlite_util.h"
#include "buffer/task_buffer.h"

namespace azr::buffer {

inline constexpr const char* kTaskColumns =
    "id, type, origin, program, input, output, inputs, outputs, message, step, proposer_sample, attempts, "
    "successes, learnability, times_referenced, times_served";
inline constexpr int kTaskColumnCount = 16;

// Reads the kTaskColumns of the current row.
Task read_task(const sql::Stmt& s);

}  // namespace azr::buffer
