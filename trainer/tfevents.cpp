// TensorBoard event files without a protobuf library: the three messages TensorBoard needs for
// scalars are small enough to encode by hand.
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
//   Event   { ... SessionLog session_log = 7; }, SessionLog { SessionStatus status = 1; } (START = 1)
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "trainer/metrics.h"

namespace azr::trainer {

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrc32cTable = make_crc32c_table();

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

template <typename T>
void put_little_endian(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_tag(e, 1, kFixed64);
  put_little_endian(e, std::bit_cast<uint64_t>(wall_time));
  put_tag(e, 2, kVarint);
  // int64 is encoded as its two's complement uint64 (negative steps take 10 bytes).
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

std::atomic<uint64_t> g_file_counter{0};

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string encode_file_version_event(double wall_time, const std::string& version) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, version);
  return e;
}

std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_tag(v, 2, kFixed32);
    put_little_endian(v, std::bit_cast<uint32_t>(static_cast<float>(value)));
    put_bytes(summary, 1, v);
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string encode_session_start_event(double wall_time, int64_t step) {
  std::string session_log;
  put_tag(session_log, 1, kVarint);
  put_varint(session_log, 1);  // SessionLog.START
  std::string e = event_header(wall_time, step);
  put_bytes(e, 7, session_log);
  return e;
}

std::string tfrecord(const std::string& data) {
  std::string r;
  put_little_endian(r, static_cast<uint64_t>(data.size()));
  uint32_t length_crc = masked_crc32c(r.data(), 8);
  put_little_endian(r, length_crc);
  r += data;
  put_little_endian(r, masked_crc32c(data.data(), data.size()));
  return r;
}

TensorBoardSink::TensorBoardSink(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create TensorBoard directory " + dir + ": " + ec.message());
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." +
                                         hostname() + "." + std::to_string(::getpid()) + "." +
                                         std::to_string(g_file_counter.fetch_add(1))))
              .string();
  // O_EXCL: never interleave records with another writer's file.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot create TensorBoard event file " + path_ + ": " + std::strerror(errno));
  append(tfrecord(encode_file_version_event(now, "brain.Event:2")));
}

TensorBoardSink::~TensorBoardSink() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardSink::write(int64_t step, double wall_time, const Scalars& scalars) {
  append(tfrecord(encode_scalars_event(wall_time, step, scalars)));
}

void TensorBoardSink::restart_at(int64_t step) {
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  append(tfrecord(encode_session_start_event(now, step)));
}

void TensorBoardSink::sync() {
  if (::fsync(fd_) != 0)
    throw std::runtime_error("cannot sync TensorBoard event file " + path_ + ": " + std::strerror(errno));
}

void TensorBoardSink::append(const std::string& record) {
  size_t done = 0;
  while (done < record.size()) {
    ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot write TensorBoard event file " + path_ + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace azr::trainer
