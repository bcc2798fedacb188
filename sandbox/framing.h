#pragma once
// Length-prefixed messages on a stream socket: u32 length, then the payload.
#include <cstdint>
#include <string>

namespace azr::sandbox {

// Messages larger than this are a protocol error (a request holds one program and its inputs).
constexpr uint32_t kMaxMessageBytes = 256u << 20;

// Blocking helpers, used by the zygote (which serves one request at a time).
bool send_message(int fd, const std::string& payload);
bool read_message(int fd, std::string& payload);  // false on EOF, error or oversize

// Incremental parser for the supervisor's non-blocking reads: append bytes, pop whole messages.
class MessageBuffer {
 public:
  void append(const char* data, size_t n) { buf_.append(data, n); }
  // Moves the next complete message into `out`. Throws std::runtime_error on an oversize frame.
  bool pop(std::string& out);

 private:
  std::string buf_;
  size_t start_ = 0;
};

}  // namespace azr::sandbox
