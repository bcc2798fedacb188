#include "trainer/console_view.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <stdexcept>

namespace azr::trainer {

namespace {

constexpr int kBarWidth = 20;
constexpr int kDefaultColumns = 100;

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Clips to `columns` characters without splitting a UTF-8 sequence (labels and phases may hold
// any text). Counts code points, which is exact for the ASCII this view draws itself.
std::string clip(const std::string& s, int columns) {
  int count = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;
    if (count == columns) return s.substr(0, i);
    ++count;
  }
  return s;
}

std::string highlight_value(const Scalars& scalars, const std::string& key) {
  for (const auto& [k, v] : scalars)
    if (k == key) return format_compact(v);
  double sum = 0;
  int n = 0;
  const std::string prefix = key + "/";
  for (const auto& [k, v] : scalars)
    if (k.compare(0, prefix.size(), prefix) == 0) sum += v, ++n;
  return n ? format_compact(sum / n) : "-";
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  auto s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string format_compact(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  double a = std::fabs(v);
  if (a >= 1e9) return fmt::format("{:.1f}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.1f}M", v / 1e6);
  if (a >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  if (a >= 100) return fmt::format("{:.0f}", v);
  return fmt::format("{:.2f}", v);
}

ConsoleView::Mode ConsoleView::resolve(const std::string& setting, int fd) {
  if (setting == "auto") return ::isatty(fd) ? Mode::Progress : Mode::Plain;
  if (setting == "progress") return Mode::Progress;
  if (setting == "plain") return Mode::Plain;
  if (setting == "off") return Mode::Off;
  throw std::invalid_argument("console must be one of auto, progress, plain, off (got '" + setting + "')");
}

ConsoleView::ConsoleView(int64_t first_step, int64_t total_steps, Mode mode, std::FILE* out,
                         std::function<double()> now, int width)
    : first_step_(first_step),
      total_steps_(total_steps),
      mode_(mode),
      out_(out),
      now_(now ? std::move(now) : steady_seconds),
      width_(width),
      start_(now_()),
      last_step_(first_step - 1),
      last_time_(start_) {}

int ConsoleView::columns() const {
  if (width_ > 0) return width_;
  winsize ws{};
  if (::ioctl(::fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return kDefaultColumns;
}

std::string ConsoleView::status_line() const {
  double frac = total_steps_ > 0 ? std::clamp(static_cast<double>(last_step_) / total_steps_, 0.0, 1.0) : 0.0;
  int filled = static_cast<int>(frac * kBarWidth);
  int64_t timed = last_step_ - first_step_ + 1;
  double eta = timed > 0 ? (last_time_ - start_) / timed * (total_steps_ - last_step_) : -1;
  std::string line = fmt::format("step {}/{} [{}{}] {}% ETA {}", last_step_, total_steps_, std::string(filled, '#'),
                                 std::string(kBarWidth - filled, '.'), static_cast<int>(frac * 100),
                                 format_duration(eta));
  if (!metrics_text_.empty()) line += " | " + metrics_text_;
  if (!phase_.empty()) line += " | " + phase_;
  // One column short of the width: writing the last column makes some terminals wrap, and the
  // next \r would then redraw on a new row.
  return clip(line, columns() - 1);
}

void ConsoleView::clear_line() {
  if (line_drawn_) std::fputs("\r\033[K", out_);
  line_drawn_ = false;
}

void ConsoleView::redraw() {
  std::fputs("\r", out_);
  std::fputs(status_line().c_str(), out_);
  std::fputs("\033[K", out_);
  std::fflush(out_);
  line_drawn_ = true;
}

void ConsoleView::phase(const std::string& what) {
  phase_ = what;
  if (mode_ == Mode::Progress) redraw();
}

void ConsoleView::step_done(int64_t step, const Scalars& scalars,
                            const std::vector<std::pair<std::string, std::string>>& highlights) {
  last_step_ = step;
  last_time_ = now_();
  metrics_text_.clear();
  for (const auto& [label, key] : highlights) {
    if (!metrics_text_.empty()) metrics_text_ += ' ';
    metrics_text_ += label + " " + highlight_value(scalars, key);
  }
  for (const auto& [k, v] : scalars)
    if (k == "perf/tokens_per_s") metrics_text_ += (metrics_text_.empty() ? "" : " | ") + format_compact(v) + " tok/s";

  if (mode_ == Mode::Progress) {
    phase_.clear();  // the phase belonged to the step just finished
    redraw();
  } else if (mode_ == Mode::Plain) {
    int64_t timed = step - first_step_ + 1;
    double elapsed = last_time_ - start_;
    double eta = timed > 0 ? elapsed / timed * (total_steps_ - step) : -1;
    std::string line = fmt::format("step {}/{} elapsed {} ETA {}", step, total_steps_, format_duration(elapsed),
                                   format_duration(eta));
    if (!metrics_text_.empty()) line += " | " + metrics_text_;
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
  }
}

void ConsoleView::message(const std::string& text) {
  if (mode_ == Mode::Off) return;
  bool redraw_after = line_drawn_;
  clear_line();
  std::fprintf(out_, "%s\n", text.c_str());
  if (redraw_after) redraw();
  std::fflush(out_);
}

void ConsoleView::finish(const std::string& summary_text) {
  if (mode_ == Mode::Off) return;
  if (line_drawn_) {
    phase_.clear();
    redraw();
    std::fputs("\n", out_);
    line_drawn_ = false;
  }
  std::fputs(summary_text.c_str(), out_);
  if (!summary_text.empty() && summary_text.back() != '\n') std::fputs("\n", out_);
  std::fflush(out_);
}

}  // namespace azr::trainer
