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

bool send_message(int fd, const std::string& payload) { return send_message(fd, {std::string_view(payload)}); }

bool send_message(int fd, std::initializer_list<std::string_view> parts) {
  size_t total = 0;
  for (std::string_view p : parts) total += p.size();
  if (total > kMaxMessageBytes) return false;
  uint32_t n = static_cast<uint32_t>(total);
  // Small messages (nearly all) go out in one write; a large one in one write per part. The
  // zygote's policy has no writev, and a few more writes cost nothing next to copying megabytes.
  constexpr size_t kCoalesceBytes = 64 << 10;
  if (total <= kCoalesceBytes) {
    std::string frame(reinterpret_cast<const char*>(&n), 4);
    frame.reserve(4 + total);
    for (std::string_view p : parts) frame.append(p);
    return write_all(fd, frame.data(), frame.size());
  }
  if (!write_all(fd, reinterpret_cast<const char*>(&n), 4)) return false;
  for (std::string_view p : parts)
    if (!write_all(fd, p.data(), p.size())) return false;
  return true;
}

bool read_message(int fd, std::string& payload) {
  uint32_t n;
  if (!read_all(fd, reinterpret_cast<char*>(&n), 4) || n > kMaxMessageBytes) return false;
  payload.resize(n);
  return read_all(fd, payload.data(), n);
}

void MessageBuffer::append(const char* data, size_t n) {
  buf_.append(data, n);
  if (buf_.size() - start_ < 4) return;
  uint32_t len;
  std::memcpy(&len, buf_.data() + start_, 4);
  if (len <= kMaxMessageBytes && buf_.capacity() < start_ + 4 + len) buf_.reserve(start_ + 4 + len);
}

bool MessageBuffer::front(std::string_view& out) {
  if (buf_.size() - start_ < 4) return false;
  uint32_t n;
  std::memcpy(&n, buf_.data() + start_, 4);
  if (n > kMaxMessageBytes) throw std::runtime_error("oversize message from worker");
  if (buf_.size() - start_ - 4 < n) return false;
  out = std::string_view(buf_).substr(start_ + 4, n);
  return true;
}

void MessageBuffer::consume() {
  uint32_t n;
  std::memcpy(&n, buf_.data() + start_, 4);
  start_ += 4 + n;
  if (start_ == buf_.size()) {
    // A buffer grown for one large message is not kept for the small ones after it.
    if (buf_.capacity() > (4u << 20)) std::string().swap(buf_);
    buf_.clear();
    start_ = 0;
  } else if (start_ > (1u << 20)) {
    buf_.erase(0, start_);
    start_ = 0;
  }
}

}  // namespace azr::sandbox
