#pragma once
// Length-prefixed messages on a stream socket: u32 length, then the payload.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace azr::sandbox {

// Messages larger than this are a protocol error (a request holds one program and its inputs).
constexpr uint32_t kMaxMessageBytes = 256u << 20;

// Blocking helpers, used by the zygote (which serves one request at a time).
bool send_message(int fd, const std::string& payload);
// One message whose payload is the concatenation of `parts`. A large payload (the results of a
// job that returned megabytes) is written part by part instead of being copied into one buffer.
bool send_message(int fd, std::initializer_list<std::string_view> parts);
bool read_message(int fd, std::string& payload);  // false on EOF, error or oversize

// Incremental parser for the supervisor's non-blocking reads: append bytes, take whole messages.
class MessageBuffer {
 public:
  // Once a frame's length is known, the buffer grows to hold all of it at once: a 100 MB
  // message is not copied through every doubling of the buffer on its way in.
  void append(const char* data, size_t n);
  // The next complete message, in place: valid until the next append() or consume().
  // Throws std::runtime_error on an oversize frame.
  bool front(std::string_view& out);
  void consume();  // drops the message front() returned

 private:
  std::string buf_;
  size_t start_ = 0;
};

}  // namespace azr::sandbox
