#pragma once
// The trainer's metrics sinks: every step's flat list of named scalars goes to metrics.jsonl,
// to a TensorBoard event file, and to the live console view (trainer/console_view.h).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace azr::trainer {

// In the order the trainer adds them; sinks keep that order.
using Scalars = std::vector<std::pair<std::string, double>>;

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  // wall_time: unix seconds.
  virtual void write(int64_t step, double wall_time, const Scalars& scalars) = 0;
  // Makes every line written so far durable (fsync); throws naming the file when it cannot. The
  // trainer calls it before publishing a checkpoint, so a power loss cannot leave a checkpoint of
  // step N with metrics lines below N lost (a resume continues from N and would never refill them).
  virtual void sync() {}
};

// One JSON object per step: {"step": N, "time": T, "<key>": value, ...}, keys in the given
// order, NaN/inf as null. Appends, so a resumed run continues the same file (after
// truncate_metrics_jsonl). Each line goes out in a single write() straight to the kernel, so a
// killed process leaves whole lines, or at worst one torn last line.
class JsonlSink : public MetricsSink {
 public:
  // Throws std::runtime_error naming the file when it cannot be opened.
  explicit JsonlSink(const std::string& path);
  ~JsonlSink() override;
  JsonlSink(const JsonlSink&) = delete;
  JsonlSink& operator=(const JsonlSink&) = delete;

  // Throws std::invalid_argument for a scalar named "step" or "time" (they would overwrite the
  // line's own fields), std::runtime_error when the write fails.
  void write(int64_t step, double wall_time, const Scalars& scalars) override;
  void sync() override;

 private:
  std::string path_;
  int fd_ = -1;
};

// The line JsonlSink writes for one step, without the newline.
std::string metrics_json_line(int64_t step, double wall_time, const Scalars& scalars);

// What truncate_metrics_jsonl dropped: the steps past the checkpoint, and the lines that are not
// a metrics line at all. A torn last line (a crash in mid-write) counts as neither: it is the
// expected debris. Anything else unreadable means the file was edited or damaged, which the
// trainer reports (first_unreadable_line, 1-based) rather than dropping it unsaid.
struct MetricsTruncation {
  int64_t lines_kept = 0;
  int64_t steps_after = 0;
  int64_t unreadable = 0;
  int64_t first_unreadable_line = 0;
  bool torn_tail = false;
};

// For a run resuming from checkpoint max_step: keeps only the lines that parse as a JSON object
// with an integer "step" <= max_step (a torn line from a crash parses as nothing and goes).
// Replaces the file atomically (temp file in the same directory + rename), so a crash here
// leaves either the old file or the new one. A missing file is nothing to do. Throws
// std::runtime_error on I/O errors.
MetricsTruncation truncate_metrics_jsonl(const std::string& path, int64_t max_step);

// CRC-32C (Castagnoli), as TFRecord framing uses it.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// TFRecord stores CRCs masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

// Serialized tensorflow Event protobufs, encoded by hand: the file_version header, and one step's
// scalars as a Summary of simple_value Values (float, so NaN is representable).
std::string encode_file_version_event(double wall_time, const std::string& version);
std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& scalars);
// SessionLog START at `step`: TensorBoard drops the points at `step` and after that earlier
// files of the run hold (TensorFlow's convention for a restart), as a resume re-runs them.
std::string encode_session_start_event(double wall_time, int64_t step);
// One TFRecord: uint64 length, masked crc of the length bytes, data, masked crc of data.
std::string tfrecord(const std::string& data);

// A TensorBoard event file events.out.tfevents.<unix s>.<hostname>.<pid>.<counter> in dir (the
// counter keeps two sinks opened in the same second apart). Starts with the "brain.Event:2"
// file_version record; one Event per write(), written in one write() to the kernel.
class TensorBoardSink : public MetricsSink {
 public:
  // Creates dir if needed. Throws std::runtime_error naming the file when it cannot be created.
  explicit TensorBoardSink(const std::string& dir);
  ~TensorBoardSink() override;
  TensorBoardSink(const TensorBoardSink&) = delete;
  TensorBoardSink& operator=(const TensorBoardSink&) = delete;

  void write(int64_t step, double wall_time, const Scalars& scalars) override;
  void sync() override;
  // A resumed run's first record: its steps from `step` on replace those an earlier life of the
  // run wrote to its own event file (encode_session_start_event).
  void restart_at(int64_t step);
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& record);
  std::string path_;
  int fd_ = -1;
};

}  // namespace azr::trainer
