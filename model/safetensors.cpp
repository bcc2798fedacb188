#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <system_error>
#include <utility>

#include "model/json_text.h"

namespace azr::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The Rust crate's MAX_HEADER_SIZE: a larger length is corruption or an attack, not a model.
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw SafetensorsError("safetensors: " + file + ": " + what);
}

std::string q(std::string_view s) { return "'" + std::string(s) + "'"; }

// The dtypes safetensors defines that we do not decode: named so the error says "unsupported"
// (a real dtype we chose not to handle) rather than "unknown" (garbage).
bool is_known_unsupported(std::string_view d) {
  static const char* const names[] = {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64",
                                      "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3",
                                      "F6_E3M2", "F4", "C64"};
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return d == n; });
}

bool parse_dtype(std::string_view s, DType& out) {
  if (s == "F32") out = DType::F32;
  else if (s == "BF16") out = DType::BF16;
  else if (s == "F16") out = DType::F16;
  else return false;
  return true;
}

// Parses JSON rejecting duplicate keys (nlohmann would keep the last one silently) and nesting
// past kMaxJsonNesting (json_text.h), which has no place in a header. Errors carry `file`.
json parse_strict_json(std::string_view text, const std::string& file, const char* what) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth > kMaxJsonNesting) fail(file, std::string(what) + " " + JsonTooDeep().what());
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    else if (ev == json::parse_event_t::object_end) keys.pop_back();
    else if (ev == json::parse_event_t::key && !keys.empty()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second) fail(file, std::string(what) + " has duplicate key " + q(k));
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    fail(file, std::string(what) + " is not valid JSON (" + json_error_text(e) + ")");
  }
}

std::uint64_t read_u64_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}

// Reads a non-negative integer that fits in u64; nlohmann stores 1.0 as a float and
// -1 as a signed integer, both refused.
bool as_u64(const json& j, std::uint64_t& out) {
  if (!j.is_number_unsigned()) return false;
  out = j.get<std::uint64_t>();
  return true;
}

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
  }
  return "?";
}

std::size_t dtype_size(DType d) { return d == DType::F32 ? 4 : 2; }

std::int64_t TensorView::numel() const {
  // A file may hold an empty tensor whose other dimensions multiply past 64 bits ([2^62, 4, 0]:
  // parse_header takes it, 0 bytes); its product in order overflowed, undefined behaviour.
  for (auto s : shape)
    if (s == 0) return 0;
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Conversions

float bf16_to_f32(std::uint16_t bits) {
  // bf16 is the top half of an f32: exact by construction.
  std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16_to_f32(std::uint16_t h) {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;  // +-0
    } else {
      // Subnormal: mant * 2^-24. Shift the leading 1 up to the implicit-bit position; each
      // shift lowers the exponent by one. f32 has the range to hold it as a normal number.
      std::uint32_t e = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --e;
      }
      u = sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);  // inf, or NaN with its payload kept
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(u >> 16);
}

void to_f32(const TensorView& t, std::span<float> out) {
  const std::size_t n = static_cast<std::size_t>(t.numel());
  if (out.size() != n) throw SafetensorsError("safetensors: to_f32: output size does not match tensor " + q(t.name));
  if (t.dtype == DType::F32) {
    if (n) std::memcpy(out.data(), t.data, n * 4);
    return;
  }
  // One loop per dtype so the conversion inlines (and the bf16 one vectorises).
  if (t.dtype == DType::BF16) {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t b;
      std::memcpy(&b, t.data + 2 * i, 2);  // the data may be unaligned; memcpy compiles to a load
      out[i] = bf16_to_f32(b);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t b;
      std::memcpy(&b, t.data + 2 * i, 2);
      out[i] = f16_to_f32(b);
    }
  }
}

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  to_f32(t, out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Header parsing

ParsedHeader parse_header(std::span<const std::byte> prefix, std::uint64_t file_size,
                          const std::string& file) {
  if (file_size < 8 || prefix.size() < 8) fail(file, "file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  const std::uint64_t n = read_u64_le(prefix.data());
  if (n > kMaxHeaderSize) fail(file, "header length " + std::to_string(n) + " exceeds the 100,000,000-byte limit");
  if (n > file_size - 8) fail(file, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(file_size) + " bytes)");
  if (prefix.size() < 8 + n) fail(file, "header is truncated in the given buffer");

  std::string_view text(reinterpret_cast<const char*>(prefix.data() + 8), n);
  json header = parse_strict_json(text, file, "header");
  if (!header.is_object()) fail(file, "header is not a JSON object");

  ParsedHeader out;
  out.data_start = static_cast<std::size_t>(8 + n);
  const std::uint64_t buffer_len = file_size - 8 - n;

  struct Entry {
    std::uint64_t begin, end;
    std::size_t index;
  };
  std::vector<Entry> spans;

  for (auto& [name, v] : header.items()) {  // nlohmann's object is a std::map: sorted by name
    if (name == "__metadata__") {
      if (!v.is_object()) fail(file, "__metadata__ is not an object");
      for (auto& [k, mv] : v.items()) {
        if (!mv.is_string()) fail(file, "__metadata__ value for " + q(k) + " is not a string");
        out.metadata[k] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + q(name) + ": ";
    if (!v.is_object()) fail(file, where + "entry is not an object");
    for (auto& [k, _] : v.items())
      if (k != "dtype" && k != "shape" && k != "data_offsets") fail(file, where + "unexpected field " + q(k));

    TensorView t;
    t.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end()) fail(file, where + "missing dtype");
    if (!dt->is_string()) fail(file, where + "dtype is not a string");
    const auto& ds = dt->get_ref<const std::string&>();
    if (!parse_dtype(ds, t.dtype)) {
      if (is_known_unsupported(ds)) fail(file, where + "unsupported dtype " + q(ds) + " (only F32, BF16, F16)");
      fail(file, where + "unknown dtype " + q(ds));
    }

    auto sh = v.find("shape");
    if (sh == v.end()) fail(file, where + "missing shape");
    if (!sh->is_array()) fail(file, where + "shape is not an array");
    // Element count, guarding overflow: any product beyond the buffer is an error anyway.
    std::uint64_t numel = 1;
    bool huge = false;
    for (auto& d : *sh) {
      std::uint64_t dim;
      if (!as_u64(d, dim)) fail(file, where + "shape has a dimension that is not a non-negative integer: " + d.dump());
      if (dim > static_cast<std::uint64_t>(INT64_MAX)) fail(file, where + "shape dimension too large: " + d.dump());
      t.shape.push_back(static_cast<std::int64_t>(dim));
      if (dim == 0) numel = 0, huge = false;
      else if (numel != 0 && (huge || numel > UINT64_MAX / 8 / dim)) huge = true;
      else numel *= dim;
    }

    auto off = v.find("data_offsets");
    if (off == v.end()) fail(file, where + "missing data_offsets");
    std::uint64_t b, e;
    if (!off->is_array() || off->size() != 2 || !as_u64((*off)[0], b) || !as_u64((*off)[1], e))
      fail(file, where + "data_offsets is not [begin, end] of non-negative integers: " + off->dump());
    if (b > e) fail(file, where + "data_offsets begin " + std::to_string(b) + " > end " + std::to_string(e));
    if (e > buffer_len) fail(file, where + "data_offsets end " + std::to_string(e) + " is past the data buffer (" + std::to_string(buffer_len) + " bytes)");
    if (huge || numel * dtype_size(t.dtype) != e - b)
      fail(file, where + "data_offsets span " + std::to_string(e - b) + " bytes but shape " + sh->dump() + " of " + ds + " needs " +
                     (huge ? std::string("more") : std::to_string(numel * dtype_size(t.dtype))));
    t.nbytes = static_cast<std::size_t>(e - b);
    spans.push_back({b, e, out.tensors.size()});
    out.tensors.push_back(std::move(t));
    out.offsets.push_back(static_cast<std::size_t>(out.data_start + b));
  }

  // The tensors must tile the buffer: sorted by offset, each starts where the previous ended.
  // Zero-byte tensors sort before a tensor at the same begin, so they never count as overlap.
  std::sort(spans.begin(), spans.end(), [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  std::uint64_t pos = 0;
  const TensorView* prev = nullptr;
  for (const auto& s : spans) {
    const auto& t = out.tensors[s.index];
    if (s.begin < pos)
      fail(file, "tensor " + q(t.name) + " [" + std::to_string(s.begin) + ", " + std::to_string(s.end) + ") overlaps tensor " + q(prev->name) + " (ends at " + std::to_string(pos) + ")");
    if (s.begin > pos)
      fail(file, "tensor " + q(t.name) + " starts at " + std::to_string(s.begin) + ", leaving a gap after byte " + std::to_string(pos) + " of the data buffer (gaps are not allowed)");
    pos = s.end;
    prev = &t;
  }
  if (pos != buffer_len)
    fail(file, std::to_string(buffer_len - pos) + " trailing bytes after the last tensor in the data buffer (tensors cover " + std::to_string(pos) + " of " + std::to_string(buffer_len) + ")");
  return out;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  const std::string label = path.string();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(label, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(label, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(label, "not a regular file");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(label, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) fail(label, std::string("mmap failed: ") + std::strerror(err));

  SafetensorsFile f;
  f.path_ = path;
  f.map_ = map;
  f.size_ = static_cast<std::size_t>(size);
  auto* base = static_cast<const std::byte*>(map);
  ParsedHeader h = parse_header({base, f.size_}, size, label);  // on throw, f's destructor unmaps
  for (std::size_t i = 0; i < h.tensors.size(); ++i) h.tensors[i].data = base + h.offsets[i];
  f.tensors_ = std::move(h.tensors);
  f.metadata_ = std::move(h.metadata);
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept { *this = std::move(o); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    size_ = std::exchange(o.size_, 0);
    tensors_ = std::move(o.tensors_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() noexcept {
  if (map_) ::munmap(map_, size_);
  map_ = nullptr;
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name, [](const TensorView& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const TensorView& SafetensorsFile::at(std::string_view name) const {
  if (auto* t = find(name)) return *t;
  fail(path_.string(), "no tensor named " + q(name));
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

Checkpoint Checkpoint::open_file(const fs::path& path) {
  Checkpoint c;
  c.files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(path)));
  for (const auto& t : c.files_[0]->tensors()) {
    c.by_name_.emplace(t.name, &t);
    c.total_size_ += t.nbytes;
  }
  return c;
}

Checkpoint Checkpoint::open_index(const fs::path& index_path) {
  const std::string label = index_path.string();
  std::string text;
  {
    int fd = ::open(index_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(label, std::string("cannot open: ") + std::strerror(errno));
    char buf[65536];
    ssize_t r;
    while ((r = ::read(fd, buf, sizeof buf)) > 0) {
      text.append(buf, static_cast<std::size_t>(r));
      if (text.size() > kMaxHeaderSize) {
        ::close(fd);
        fail(label, "index is larger than 100,000,000 bytes");
      }
    }
    ::close(fd);
    if (r < 0) fail(label, "read failed");
  }
  json idx = parse_strict_json(text, label, "index");
  if (!idx.is_object()) fail(label, "index is not a JSON object");
  auto wm = idx.find("weight_map");
  if (wm == idx.end() || !wm->is_object()) fail(label, "index has no weight_map object");

  Checkpoint c;
  bool have_total = false;
  if (auto md = idx.find("metadata"); md != idx.end()) {
    if (!md->is_object()) fail(label, "index metadata is not an object");
    if (auto ts = md->find("total_size"); ts != md->end()) {
      // Some exporters write total_size as a float (e.g. 988065536.0); accept integral values.
      if (ts->is_number_unsigned()) c.total_size_ = ts->get<std::uint64_t>();
      else if (ts->is_number_float() && ts->get<double>() >= 0 && ts->get<double>() == static_cast<double>(static_cast<std::uint64_t>(ts->get<double>())))
        c.total_size_ = static_cast<std::uint64_t>(ts->get<double>());
      else fail(label, "index metadata.total_size is not a non-negative integer");
      have_total = true;
    }
  }

  const fs::path dir = index_path.parent_path();
  std::map<std::string, std::size_t> shard_slot;  // shard file name -> files_ index
  for (auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) fail(label, "weight_map entry for tensor " + q(name) + " is not a string");
    const auto& s = shard.get_ref<const std::string&>();
    // A shard is a file next to the index; anything else (a path, "..") is refused, so an index
    // cannot make us map arbitrary files.
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
      fail(label, "weight_map maps tensor " + q(name) + " to " + q(s) + ", which is not a file name in the index's directory");
    auto it = shard_slot.find(s);
    if (it == shard_slot.end()) {
      const fs::path p = dir / s;
      std::error_code ec;
      if (!fs::is_regular_file(p, ec))
        fail(label, "weight_map maps tensor " + q(name) + " to missing shard " + q(s));
      c.files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(p)));
      it = shard_slot.emplace(s, c.files_.size() - 1).first;
    }
    const TensorView* t = c.files_[it->second]->find(name);
    if (!t) fail(label, "weight_map maps tensor " + q(name) + " to shard " + q(s) + ", which does not contain it");
    c.by_name_.emplace(name, t);
  }
  if (!have_total)
    for (auto& [_, t] : c.by_name_) c.total_size_ += t->nbytes;
  return c;
}

bool Checkpoint::contains(std::string_view name) const { return by_name_.find(name) != by_name_.end(); }

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::at(std::string_view name) const {
  if (auto* t = find(name)) return *t;
  throw SafetensorsError("safetensors: checkpoint has no tensor named " + q(name));
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (auto& [n, _] : by_name_) out.push_back(n);
  return out;
}

Checkpoint open_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / kSingleName, ec)) return Checkpoint::open_file(dir / kSingleName);
  if (fs::is_regular_file(dir / kIndexName, ec)) return Checkpoint::open_index(dir / kIndexName);
  fail(dir.string(), std::string("no ") + kSingleName + " or " + kIndexName + " in this directory");
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

void write_all(int fd, const void* data, std::size_t n, const std::string& label) {
  auto* p = static_cast<const char*>(data);
  while (n) {
    ssize_t w = ::write(fd, p, std::min<std::size_t>(n, 1u << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(label, std::string("write failed: ") + std::strerror(errno));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Writes `bytes` producers to a temp file next to `path`, fsyncs and renames it into place, so a
// crash leaves either the old file or the new one, never half of one.
template <class Body>
void write_atomically(const fs::path& path, Body body) {
  const std::string label = path.string();
  std::string tmpl = label + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) fail(label, std::string("cannot create temp file: ") + std::strerror(errno));
  try {
    body(fd, label);
    if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) fail(label, std::string("fsync failed: ") + std::strerror(errno));
    if (::close(fd) != 0) {
      fd = -1;
      fail(label, std::string("close failed: ") + std::strerror(errno));
    }
    fd = -1;
    if (::rename(tmpl.c_str(), path.c_str()) != 0) fail(label, std::string("rename failed: ") + std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmpl.c_str());
    throw;
  }
}

void check_tensors(std::span<const TensorView> tensors, const std::string& label) {
  std::set<std::string_view> seen;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") fail(label, "cannot write a tensor named " + q(t.name));
    if (!seen.insert(t.name).second) fail(label, "duplicate tensor name " + q(t.name));
    for (auto d : t.shape)
      if (d < 0) fail(label, "tensor " + q(t.name) + ": negative dimension in shape");
    if (static_cast<std::uint64_t>(t.numel()) * dtype_size(t.dtype) != t.nbytes)
      fail(label, "tensor " + q(t.name) + ": nbytes " + std::to_string(t.nbytes) + " does not match its shape and dtype");
    if (t.nbytes && !t.data) fail(label, "tensor " + q(t.name) + ": no data");
  }
}

// model-DDDDD-of-DDDDD.safetensors, the names save_pretrained gives shards. (Not std::regex:
// libstdc++'s regex trips -Wmaybe-uninitialized under sanitizers.)
bool is_shard_name(std::string_view n) {
  auto digits = [&](std::size_t at) {
    return std::all_of(n.begin() + static_cast<std::ptrdiff_t>(at), n.begin() + static_cast<std::ptrdiff_t>(at + 5),
                       [](char c) { return c >= '0' && c <= '9'; });
  };
  return n.size() == 32 && n.substr(0, 6) == "model-" && digits(6) && n.substr(11, 4) == "-of-" && digits(15) &&
         n.substr(20) == ".safetensors";
}

}  // namespace

void write_safetensors(const fs::path& path, std::span<const TensorView> tensors, const Metadata& metadata) {
  const std::string label = path.string();
  check_tensors(tensors, label);
  std::vector<const TensorView*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorView* a, const TensorView* b) {
    auto sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });

  json header = json::object();
  Metadata md = metadata;
  md.emplace("format", "pt");
  header["__metadata__"] = md;
  std::uint64_t pos = 0;
  for (const TensorView* t : order) {
    header[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {pos, pos + t->nbytes}}};
    pos += t->nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-aligned
  if (text.size() > kMaxHeaderSize) fail(label, "header would exceed 100,000,000 bytes");

  write_atomically(path, [&](int fd, const std::string& l) {
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));
    write_all(fd, len, 8, l);
    write_all(fd, text.data(), text.size(), l);
    for (const TensorView* t : order)
      if (t->nbytes) write_all(fd, t->data, t->nbytes, l);
  });
}

std::vector<std::string> write_checkpoint(const fs::path& dir, std::span<const TensorView> tensors,
                                          std::uint64_t max_shard_bytes, const Metadata& metadata) {
  const std::string label = dir.string();
  if (max_shard_bytes == 0) fail(label, "max_shard_bytes must be positive");
  check_tensors(tensors, label);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(label, "cannot create directory: " + ec.message());

  std::vector<const TensorView*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorView* a, const TensorView* b) { return a->name < b->name; });

  // Greedy packing as transformers' split_torch_state_dict_into_shards does, in name order.
  std::vector<std::vector<TensorView>> shards;
  std::uint64_t cur = 0, total = 0;
  for (const TensorView* t : order) {
    if (shards.empty() || (cur + t->nbytes > max_shard_bytes && cur > 0)) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(*t);
    cur += t->nbytes;
    total += t->nbytes;
  }
  if (shards.empty()) shards.emplace_back();  // an empty model is still one (empty) file

  std::vector<std::string> written;
  if (shards.size() == 1) {
    write_safetensors(dir / kSingleName, shards[0], metadata);
    written.push_back(kSingleName);
  } else {
    json weight_map = json::object();
    const std::size_t k = shards.size();
    for (std::size_t i = 0; i < k; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, k);
      write_safetensors(dir / name, shards[i], metadata);
      written.push_back(name);
      for (const auto& t : shards[i]) weight_map[t.name] = name;
    }
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    write_atomically(dir / kIndexName, [&](int fd, const std::string& l) { write_all(fd, text.data(), text.size(), l); });
    written.push_back(kIndexName);
  }

  // Remove what an earlier save left behind and this one did not rewrite, so the directory
  // describes exactly one checkpoint.
  std::set<std::string> keep(written.begin(), written.end());
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (keep.count(n)) continue;
    if (n == kSingleName || n == kIndexName || is_shard_name(n)) fs::remove(e.path(), ec);
  }
  return written;
}

}  // namespace azr::model
