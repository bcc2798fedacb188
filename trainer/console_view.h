#pragma once
// The live console of `azr train`: one redrawn status line on a terminal, one plain line per
// step otherwise (logs, CI), or nothing.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/metrics.h"

namespace azr::trainer {

class ConsoleView {
 public:
  enum class Mode { Progress, Plain, Off };

  // "auto" -> Progress if fd is a terminal, else Plain; "progress", "plain", "off".
  // Throws std::invalid_argument naming the accepted values for anything else.
  static Mode resolve(const std::string& setting, int fd);

  // Steps are numbered 1..total_steps; first_step is the first one this process runs (N + 1
  // after resuming from checkpoint N), so the ETA only counts steps timed here.
  // now: seconds on any monotonic clock (default: steady_clock); injectable for tests.
  // width: columns of the progress line; 0 asks the terminal (TIOCGWINSZ) each redraw, 100 if
  // it cannot tell.
  ConsoleView(int64_t first_step, int64_t total_steps, Mode mode, std::FILE* out = stderr,
              std::function<double()> now = {}, int width = 0);

  // The current phase ("generating solver rollouts"); shown on the progress line only.
  void phase(const std::string& what);
  // highlights: (label, metric key) pairs shown in order. A key missing from scalars shows the
  // mean of its "key/..." children (solver/accuracy -> mean over solver/accuracy/<type>), or
  // "-" when there are none.
  void step_done(int64_t step, const Scalars& scalars, const std::vector<std::pair<std::string, std::string>>& highlights);
  // A line above the progress line (which is cleared and redrawn), or a plain line.
  void message(const std::string& text);
  // Ends the progress line and prints the summary block.
  void finish(const std::string& summary_text);

  Mode mode() const { return mode_; }

 private:
  std::string status_line() const;
  int columns() const;
  void redraw();
  void clear_line();

  int64_t first_step_;
  int64_t total_steps_;
  Mode mode_;
  std::FILE* out_;
  std::function<double()> now_;
  int width_;
  double start_;
  int64_t last_step_ = 0;
  double last_time_ = 0;
  std::string phase_;
  std::string metrics_text_;  // "valid 0.42 solve 0.31 | 1.2k tok/s" of the last step
  bool line_drawn_ = false;
};

// "45s", "3m12s", "2h05m", "3d04h"; "?" for negative or non-finite.
std::string format_duration(double seconds);
// Short human number: "0.42", "12.50", "345", "1.2k", "3.4M", "nan".
std::string format_compact(double v);

}  // namespace azr::trainer
