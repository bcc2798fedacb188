#include "trainer/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace azr::trainer {

namespace {

std::runtime_error io_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

// write() may return short on signals or full disks; a line must still go out whole or fail.
void write_all(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error("cannot write", path);
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string metrics_json_line(int64_t step, double wall_time, const Scalars& scalars) {
  nlohmann::ordered_json line;
  line["step"] = step;
  line["time"] = wall_time;
  for (const auto& [key, value] : scalars) {
    if (key == "step" || key == "time")
      throw std::invalid_argument("metric name '" + key + "' is reserved in metrics.jsonl");
    if (std::isfinite(value))
      line[key] = value;
    else
      line[key] = nullptr;
  }
  return line.dump();
}

JsonlSink::JsonlSink(const std::string& path) : path_(path) {
  // O_RDWR rather than O_WRONLY only so the last byte can be checked below.
  fd_ = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw io_error("cannot open metrics file", path);
  // A crash can leave a torn last line without its newline; start on a fresh line so the first
  // new record does not glue onto it and become unparseable too.
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && st.st_size > 0) {
    char last = '\n';
    if (::pread(fd_, &last, 1, st.st_size - 1) == 1 && last != '\n') write_all(fd_, "\n", path_);
  }
}

JsonlSink::~JsonlSink() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonlSink::write(int64_t step, double wall_time, const Scalars& scalars) {
  write_all(fd_, metrics_json_line(step, wall_time, scalars) + "\n", path_);
}

void JsonlSink::sync() {
  if (::fsync(fd_) != 0) throw io_error("cannot sync", path_);
}

MetricsTruncation truncate_metrics_jsonl(const std::string& path, int64_t max_step) {
  MetricsTruncation report;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) return report;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error("cannot read metrics file", path);
  std::string kept;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    auto it = j.is_object() ? j.find("step") : j.end();
    if (!j.is_object() || it == j.end() || !it->is_number_integer()) {
      // getline sets eof only for a last line without its newline: the one a crash can tear.
      if (in.eof()) {
        report.torn_tail = true;
      } else if (!line.empty()) {
        if (report.unreadable++ == 0) report.first_unreadable_line = line_number;
      }
      continue;
    }
    if (it->get<int64_t>() > max_step) {
      ++report.steps_after;
      continue;
    }
    kept += line;
    kept += '\n';
    ++report.lines_kept;
  }
  in.close();

  // Same directory as the target, so the rename cannot cross filesystems. A copy a killed
  // earlier resume left (another pid's) goes too.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const std::filesystem::path target(path);
  const std::string stale_prefix = target.filename().string() + ".tmp.";
  const std::filesystem::path folder = target.parent_path().empty() ? "." : target.parent_path();
  for (const auto& e : std::filesystem::directory_iterator(folder, ec))
    if (e.path().filename().string().rfind(stale_prefix, 0) == 0) std::filesystem::remove(e.path(), ec);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw io_error("cannot create", tmp);
  try {
    write_all(fd, kept, tmp);
    // Without fsync a crash after the rename could leave the new name pointing at empty data.
    if (::fsync(fd) != 0) throw io_error("cannot sync", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = io_error("cannot replace", path);
    ::unlink(tmp.c_str());
    throw err;
  }
  return report;
}

}  // namespace azr::trainer
