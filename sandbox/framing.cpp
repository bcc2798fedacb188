#include "sandbox/framing.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace azr::sandbox {
namespace {

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

bool send_message(int fd, const std::string& payload) {
  if (payload.size() > kMaxMessageBytes) return false;
  std::string frame(4, '\0');
  uint32_t n = static_cast<uint32_t>(payload.size());
  std::memcpy(frame.data(), &n, 4);
  frame += payload;
  return write_all(fd, frame.data(), frame.size());
}

bool read_message(int fd, std::string& payload) {
  uint32_t n;
  if (!read_all(fd, reinterpret_cast<char*>(&n), 4) || n > kMaxMessageBytes) return false;
  payload.resize(n);
  return read_all(fd, payload.data(), n);
}

bool MessageBuffer::pop(std::string& out) {
  if (buf_.size() - start_ < 4) return false;
  uint32_t n;
  std::memcpy(&n, buf_.data() + start_, 4);
  if (n > kMaxMessageBytes) throw std::runtime_error("oversize message from worker");
  if (buf_.size() - start_ - 4 < n) return false;
  out.assign(buf_, start_ + 4, n);
  start_ += 4 + n;
  if (start_ == buf_.size()) {
    buf_.clear();
    start_ = 0;
  } else if (start_ > (1u << 20)) {
    buf_.erase(0, start_);
    start_ = 0;
  }
  return true;
}

}  // namespace azr::sandbox
