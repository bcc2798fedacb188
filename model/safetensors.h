#pragma once
// safetensors: the Hugging Face weight format, read memory-mapped and written atomically.
//
// Layout: u64 little-endian N, N bytes of UTF-8 JSON (space-padded), then the data buffer.
// The JSON maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the data buffer) plus an optional "__metadata__": {str: str}.
//
// Validation follows the reference Rust crate (what transformers, vLLM and candle use), so a
// file we accept loads in those tools and a file we write is one they accept:
//   - header length <= 100,000,000 bytes and within the file;
//   - every tensor's [begin, end) lies in the buffer, has product(shape) * dtype size bytes;
//   - tensors, sorted by offset, tile the buffer exactly: no overlap, NO GAPS and no trailing
//     bytes (the Rust crate rejects gaps as InvalidOffset and a short tiling as
//     MetadataIncompleteBuffer; accepting them here would let us load files others refuse);
//   - duplicate keys anywhere in the JSON are an error (a JSON parser would silently keep one).
// Dtypes: F32, BF16 and F16 are supported; the other safetensors dtypes are recognised by name
// and refused as "unsupported dtype", an unknown name is "unknown dtype".
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace azr::model {

// Every malformed input is reported as this, with the file and the tensor or field named.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType { F32, BF16, F16 };

const char* dtype_name(DType d);    // "F32", "BF16", "F16"
std::size_t dtype_size(DType d);    // bytes per element

using Metadata = std::map<std::string, std::string>;

// One tensor: a view into a mapped file (reader) or into caller memory (writer input).
// `data` need not be aligned to the element size; the conversion helpers use memcpy.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;
  std::size_t nbytes = 0;

  std::int64_t numel() const;
};

// Exact conversions (every bf16 and f16 value, subnormals, infinities and NaN payloads
// included, is representable in f32).
float bf16_to_f32(std::uint16_t bits);
float f16_to_f32(std::uint16_t bits);
// Round-to-nearest-even f32 -> bf16 (NaN stays a quiet NaN). For writing test and bench data.
std::uint16_t f32_to_bf16(float f);
// Decodes any supported tensor into `out` (out.size() must equal t.numel()).
void to_f32(const TensorView& t, std::span<float> out);
std::vector<float> to_f32(const TensorView& t);

// The parsed, validated header of a file of `file_size` bytes whose first bytes are `prefix`
// (at least the 8 length bytes plus the header). Offsets in `tensors` are relative to the file,
// `data` is null. Pure function of its inputs: the fuzz target drives it directly.
struct ParsedHeader {
  std::size_t data_start = 0;      // 8 + N
  std::vector<TensorView> tensors;  // sorted by name; data = nullptr, offsets in `offsets`
  std::vector<std::size_t> offsets; // file offset of each tensor's first byte, same order
  Metadata metadata;
};
ParsedHeader parse_header(std::span<const std::byte> prefix, std::uint64_t file_size,
                          const std::string& file_label);

// One memory-mapped .safetensors file (MAP_PRIVATE, PROT_READ). The views stay valid as long as
// this object lives; it is move-only.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }  // sorted by name
  const Metadata& metadata() const { return metadata_; }
  const TensorView* find(std::string_view name) const;  // nullptr if absent
  const TensorView& at(std::string_view name) const;    // throws SafetensorsError if absent
  std::size_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;
  void release() noexcept;

  std::filesystem::path path_;
  void* map_ = nullptr;
  std::size_t size_ = 0;
  std::vector<TensorView> tensors_;
  Metadata metadata_;
};

// A checkpoint: one model.safetensors, or the shards of a model.safetensors.index.json
// ({"metadata": {"total_size": N}, "weight_map": {name: shard file}}). All shards are opened
// (mapped, headers validated) up front: mapping costs only address space, and a missing shard or
// a weight_map entry absent from its shard is then an error at load, not mid-training. As in
// transformers, the weight_map is the list of tensors: a shard's tensors it does not name are
// not visible. Shard names must be plain file names next to the index (no paths).
class Checkpoint {
 public:
  static Checkpoint open_file(const std::filesystem::path& safetensors_path);
  static Checkpoint open_index(const std::filesystem::path& index_path);

  bool contains(std::string_view name) const;
  const TensorView* find(std::string_view name) const;
  const TensorView& at(std::string_view name) const;  // throws SafetensorsError naming the tensor
  std::vector<std::string> names() const;             // sorted
  std::size_t size() const { return by_name_.size(); }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // The index's metadata.total_size, or the sum of nbytes for a single file.
  std::uint64_t total_size() const { return total_size_; }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;  // unique_ptr: views' addresses stay put
  std::map<std::string, const TensorView*, std::less<>> by_name_;
  std::uint64_t total_size_ = 0;
};

// dir/model.safetensors if present, else dir/model.safetensors.index.json; error if neither.
Checkpoint open_checkpoint(const std::filesystem::path& dir);

// Writes one file atomically (temp file in the same directory, fsync, rename). Data order is by
// element size (largest first), then by name: reproducible, and every tensor's bytes start at a
// multiple of its element size (the header is space-padded to a multiple of 8), which is what the
// Rust crate does. If `metadata` has no "format" key, "format": "pt" is added: transformers
// refuses a safetensors file whose metadata lacks a known format.
void write_safetensors(const std::filesystem::path& path, std::span<const TensorView> tensors,
                       const Metadata& metadata = {});

// Writes a checkpoint into `dir` the way transformers' save_pretrained does: tensors sorted by
// name, greedily packed into shards of at most `max_shard_bytes` of tensor data (a tensor larger
// than that gets a shard of its own), named model-00001-of-0000K.safetensors, plus
// model.safetensors.index.json with total_size (sum of nbytes) and weight_map. A single shard is
// written as model.safetensors with no index. The index is written last, so a reader never finds
// it pointing at shards not yet written; stale files of an earlier save (other shard counts,
// the other layout) are removed. Returns the file names written (index last).
std::vector<std::string> write_checkpoint(const std::filesystem::path& dir,
                                          std::span<const TensorView> tensors,
                                          std::uint64_t max_shard_bytes,
                                          const Metadata& metadata = {});

}  // namespace azr::model
