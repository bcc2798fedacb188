// safetensors load cost for a ~1 GB BF16 checkpoint shaped like Qwen2.5-0.5B (290 tensors:
// embed_tokens [151936, 896] and 24 layers of q/k/v/o, MLP and norms), against the plain way
// to load a file, measured in the same run:
//   write            write_safetensors (header, data, fsync, rename), GB/s
//   open             SafetensorsFile::open: open + fstat + mmap + header parse/validation
//   mmap full read   open, then every tensor converted bf16 -> f32 and summed (touches every
//                    byte through the mapping)
//   read() full      read() of the whole file into one buffer, then the same conversion
//   checksum         a checkpoint's manifest (trainer/checkpoint.h: XXH3-128 of every file in the
//                    folder, written by write_checksums, checked by verify_checksums), against
//                    the read() row: what the hash adds to reading the bytes
// Each read is measured warm (file in the page cache: best of 3) and cold (pages dropped with
// posix_fadvise(DONTNEED) first; the file is clean after the fsync, so the drop takes effect).
// Both paths must produce the same sum. Prints a table and one JSON line; never asserts on time.
//
//   safetensors_bench [--dir DIR] [--layers N]
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "trainer/checkpoint.h"

namespace {

namespace fs = std::filesystem;
namespace am = azr::model;
using Clock = std::chrono::steady_clock;

double secs_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Spec {
  std::string name;
  std::vector<std::int64_t> shape;
};

std::vector<Spec> qwen05b_shapes(int layers) {
  const std::int64_t H = 896, I = 4864, kv = 128, V = 151936;
  std::vector<Spec> s = {{"model.embed_tokens.weight", {V, H}}, {"model.norm.weight", {H}}};
  for (int i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (Spec t : std::vector<Spec>{{"input_layernorm.weight", {H}}, {"post_attention_layernorm.weight", {H}},
                                    {"self_attn.q_proj.weight", {H, H}}, {"self_attn.q_proj.bias", {H}},
                                    {"self_attn.k_proj.weight", {kv, H}}, {"self_attn.k_proj.bias", {kv}},
                                    {"self_attn.v_proj.weight", {kv, H}}, {"self_attn.v_proj.bias", {kv}},
                                    {"self_attn.o_proj.weight", {H, H}}, {"mlp.gate_proj.weight", {I, H}},
                                    {"mlp.up_proj.weight", {I, H}}, {"mlp.down_proj.weight", {H, I}}}) {
      t.name = p + t.name;
      s.push_back(t);
    }
  }
  return s;
}

// Sum of every tensor's values as f32, converted in cache-sized chunks (what a loader that
// casts to f32 does). Double accumulation so the two paths agree exactly.
double convert_sum(const std::vector<am::TensorView>& tensors) {
  constexpr std::size_t kChunk = 1 << 16;
  static std::vector<float> buf(kChunk);
  double total = 0;
  for (const auto& t : tensors) {
    const std::size_t n = static_cast<std::size_t>(t.numel());
    for (std::size_t i = 0; i < n; i += kChunk) {
      const std::size_t m = std::min(kChunk, n - i);
      am::TensorView part{t.name, t.dtype, {static_cast<std::int64_t>(m)}, t.data + i * 2, m * 2};
      am::to_f32(part, std::span<float>(buf.data(), m));
      // Eight independent partial sums: one float accumulator would serialise on add latency
      // and measure that instead of the load path. Chunks are added in double.
      float acc[8] = {};
      std::size_t j = 0;
      for (; j + 8 <= m; j += 8)
        for (int k = 0; k < 8; ++k) acc[k] += buf[j + static_cast<std::size_t>(k)];
      for (; j < m; ++j) acc[0] += buf[j];
      for (float a : acc) total += a;
    }
  }
  return total;
}

void drop_cache(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double mmap_read(const fs::path& p, double& sum) {
  auto t0 = Clock::now();
  auto f = am::SafetensorsFile::open(p);
  sum = convert_sum(f.tensors());
  return secs_since(t0);
}

double plain_read(const fs::path& p, double& sum) {
  auto t0 = Clock::now();
  int fd = ::open(p.c_str(), O_RDONLY);
  const auto size = static_cast<std::size_t>(fs::file_size(p));
  std::unique_ptr<std::byte[]> buf(new std::byte[size]);  // uninitialised: no page-zeroing pass
  std::size_t got = 0;
  while (got < size) {
    ssize_t r = ::read(fd, buf.get() + got, size - got);
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  auto h = am::parse_header({buf.get(), got}, got, p.string());
  for (std::size_t i = 0; i < h.tensors.size(); ++i) h.tensors[i].data = buf.get() + h.offsets[i];
  sum = convert_sum(h.tensors);
  return secs_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir;
  int layers = 24;
  CLI::App app{"safetensors write, open and full read (mmap against read()) of a Qwen2.5-0.5B-shaped file"};
  app.add_option("--dir", dir, "folder for the file (default: a fresh temporary one)");
  app.add_option("--layers", layers, "transformer layers of the checkpoint")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const bool own_dir = dir.empty();
  if (own_dir) {
    std::string tmpl = (fs::temp_directory_path() / "azr-st-bench-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) return 1;
    dir = tmpl;
  }
  const fs::path path = dir / "model.safetensors";

  // Source data: bf16 bit patterns of values in about +-[2^-15, 1), from a fixed xorshift.
  auto specs = qwen05b_shapes(layers);
  std::size_t total = 0;
  for (const auto& s : specs) {
    std::size_t n = 1;
    for (auto d : s.shape) n *= static_cast<std::size_t>(d);
    total += n * 2;
  }
  std::vector<std::uint16_t> src(total / 2);
  std::uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& v : src) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<std::uint16_t>((x & 0x8000) | ((0x70 + (x >> 16) % 15) << 7) | ((x >> 24) & 0x7f));
  }
  std::vector<am::TensorView> views;
  std::size_t off = 0;
  for (const auto& s : specs) {
    am::TensorView t{s.name, am::DType::BF16, s.shape};
    t.nbytes = static_cast<std::size_t>(t.numel()) * 2;
    t.data = reinterpret_cast<const std::byte*>(src.data()) + off;
    off += t.nbytes;
    views.push_back(t);
  }

  auto t0 = Clock::now();
  am::write_safetensors(path, views);
  const double write_s = secs_since(t0);
  const double file_gb = static_cast<double>(fs::file_size(path)) / 1e9;
  src.clear();
  src.shrink_to_fit();

  std::vector<double> opens;
  for (int i = 0; i < 20; ++i) {
    auto t = Clock::now();
    auto f = am::SafetensorsFile::open(path);
    opens.push_back(secs_since(t));
  }
  std::sort(opens.begin(), opens.end());

  double s_mmap = 0, s_read = 0, s;
  double mmap_warm = 1e9, read_warm = 1e9;
  mmap_read(path, s);  // fault the page cache in once
  for (int i = 0; i < 3; ++i) {
    mmap_warm = std::min(mmap_warm, mmap_read(path, s_mmap));
    read_warm = std::min(read_warm, plain_read(path, s_read));
  }
  drop_cache(path);
  const double mmap_cold = mmap_read(path, s);
  drop_cache(path);
  const double read_cold = plain_read(path, s);
  const bool sums_agree = s_mmap == s_read && s == s_read;

  // The manifest over a folder holding the file alone (a hard link to it: --dir may hold other
  // files), warm (best of 3) and cold, then its check, cold.
  const fs::path sums_dir = dir / "azr-checksum-bench";
  fs::remove_all(sums_dir);
  fs::create_directory(sums_dir);
  fs::create_hard_link(path, sums_dir / path.filename());
  double checksum_warm = 1e9;
  for (int i = 0; i < 3; ++i) {
    auto t = Clock::now();
    azr::trainer::write_checksums(sums_dir);
    checksum_warm = std::min(checksum_warm, secs_since(t));
  }
  drop_cache(path);
  auto tc = Clock::now();
  azr::trainer::write_checksums(sums_dir);
  const double checksum_cold = secs_since(tc);
  drop_cache(path);
  tc = Clock::now();
  bool verified = false;
  try {
    verified = azr::trainer::verify_checksums(sums_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors_bench: %s\n", e.what());
  }
  const double verify_cold = secs_since(tc);
  fs::remove_all(sums_dir);

  std::printf("safetensors_bench: %zu BF16 tensors, %.3f GB file (%s)\n", views.size(), file_gb, path.c_str());
  std::printf("%-28s %12s %10s\n", "measure", "time", "GB/s");
  std::printf("%-28s %10.1f ms %10.2f\n", "write (fsync, rename)", write_s * 1e3, file_gb / write_s);
  std::printf("%-28s %10.1f us %10s\n", "open (mmap + header) p50", opens[opens.size() / 2] * 1e6, "-");
  std::printf("%-28s %10.1f ms %10.2f\n", "mmap full read, warm", mmap_warm * 1e3, file_gb / mmap_warm);
  std::printf("%-28s %10.1f ms %10.2f\n", "read() full read, warm", read_warm * 1e3, file_gb / read_warm);
  std::printf("%-28s %10.1f ms %10.2f\n", "mmap full read, cold", mmap_cold * 1e3, file_gb / mmap_cold);
  std::printf("%-28s %10.1f ms %10.2f\n", "read() full read, cold", read_cold * 1e3, file_gb / read_cold);
  std::printf("%-28s %10.1f ms %10.2f\n", "checksum (XXH3-128), warm", checksum_warm * 1e3, file_gb / checksum_warm);
  std::printf("%-28s %10.1f ms %10.2f\n", "checksum (XXH3-128), cold", checksum_cold * 1e3, file_gb / checksum_cold);
  std::printf("%-28s %10.1f ms %10.2f\n", "verify checksums, cold", verify_cold * 1e3, file_gb / verify_cold);
  std::printf("sums agree: %s (%.6g); checksums verify: %s\n", sums_agree ? "yes" : "NO", s_mmap,
              verified ? "yes" : "NO");

  nlohmann::ordered_json j = {{"bench", "safetensors"},
                              {"tensors", views.size()},
                              {"file_gb", file_gb},
                              {"write_gbps", file_gb / write_s},
                              {"open_us_p50", opens[opens.size() / 2] * 1e6},
                              {"open_us_max", opens.back() * 1e6},
                              {"mmap_warm_gbps", file_gb / mmap_warm},
                              {"read_warm_gbps", file_gb / read_warm},
                              {"mmap_cold_gbps", file_gb / mmap_cold},
                              {"read_cold_gbps", file_gb / read_cold},
                              {"checksum_warm_gbps", file_gb / checksum_warm},
                              {"checksum_cold_gbps", file_gb / checksum_cold},
                              {"verify_cold_gbps", file_gb / verify_cold},
                              {"sums_agree", sums_agree},
                              {"checksums_verify", verified}};
  std::printf("%s\n", j.dump().c_str());

  std::error_code ec;
  if (own_dir) fs::remove_all(dir, ec);
  else fs::remove(path, ec);
  return sums_agree && verified ? 0 : 1;
}
