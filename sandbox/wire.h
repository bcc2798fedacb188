#pragma once
// Little-endian binary writer/reader for the messages between the supervisor, the zygotes and
// their children. The reader is strict and bounded: every read checks the remaining length, so
// a truncated or hostile message throws instead of reading past the end.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace azr::sandbox::wire {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }

 private:
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  uint32_t u32() { return pod<uint32_t>(); }
  uint64_t u64() { return pod<uint64_t>(); }
  int64_t i64() { return pod<int64_t>(); }
  double f64() { return pod<double>(); }
  std::string_view str() { return take(u32()); }
  std::string_view take(size_t n) {
    if (n > in_.size() - pos_) throw Error("message truncated");
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  size_t remaining() const { return in_.size() - pos_; }
  size_t offset() const { return pos_; }

 private:
  template <class T>
  T pod() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace azr::sandbox::wire
