// safetensors reader/writer. The truth is independent of the C++ code under test:
// tests/model/make_safetensors.py (json + struct only) writes files whose decoded values it
// computes by its own rules, and reads back the files the C++ writer produced.
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace {

namespace fs = std::filesystem;
namespace am = azr::model;
using nlohmann::json;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "azr-st-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs make_safetensors.py with the given arguments; returns stdout, fails the test otherwise.
  std::string py(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {azr::testing::env_or_fail("AZR_PYTHON"),
                                     azr::testing::env_or_fail("AZR_TESTS_DIR") + "/model/make_safetensors.py"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = azr::testing::run_process(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }

  // A raw file: u64 length + header text + data; `len` overrides the length field.
  fs::path raw(const std::string& name, const std::string& header, const std::string& data = "",
               std::optional<std::uint64_t> len = std::nullopt) {
    fs::path p = dir_ / name;
    std::ofstream f(p, std::ios::binary);
    std::uint64_t n = len.value_or(header.size());
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
    f << header << data;
    return p;
  }

  void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

  fs::path dir_;
};

// The message of the SafetensorsError `fn` throws, or "" (with a test failure) if none.
template <class F>
std::string error_of(F fn) {
  try {
    fn();
  } catch (const am::SafetensorsError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error";
  return "";
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::string bytes_hex(const std::byte* p, std::size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    auto b = static_cast<unsigned>(p[i]);
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

// Compares a decoded tensor with expected.json's float.hex() strings.
void expect_values(const am::TensorView& t, const json& exp) {
  ASSERT_EQ(am::dtype_name(t.dtype), exp["dtype"].get<std::string>()) << t.name;
  ASSERT_EQ(json(t.shape), exp["shape"]) << t.name;
  auto got = am::to_f32(t);
  const auto& vals = exp["values"];
  ASSERT_EQ(got.size(), vals.size()) << t.name;
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i) {
    const auto s = vals[i].get<std::string>();
    if (s == "nan") {
      if (!std::isnan(got[i])) ++bad, ADD_FAILURE() << t.name << "[" << i << "] = " << got[i] << ", expected nan";
      continue;
    }
    float want = static_cast<float>(std::strtod(s.c_str(), nullptr));  // exact: every value is an f32
    if (bits(got[i]) != bits(want)) ++bad, ADD_FAILURE() << t.name << "[" << i << "] = " << got[i] << ", expected " << s;
  }
}

// ------------------------------------------------------------------------------------------
// Conversions

TEST(SafetensorsConvert, KnownBitPatterns) {
  EXPECT_EQ(am::f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(am::f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(am::f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(am::f16_to_f32(0x0001), std::ldexp(1.0f, -24));             // smallest subnormal
  EXPECT_EQ(am::f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));           // largest subnormal
  EXPECT_EQ(bits(am::f16_to_f32(0x8000)), 0x80000000u);                  // -0
  EXPECT_EQ(am::f16_to_f32(0x7c00), INFINITY);
  EXPECT_EQ(am::f16_to_f32(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(am::f16_to_f32(0x7e00)));
  EXPECT_EQ(am::bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(am::bf16_to_f32(0x4049), 3.140625f);
  EXPECT_EQ(am::bf16_to_f32(0x0001), std::ldexp(1.0f, -133));
  // f32 -> bf16 rounds to nearest, ties to even; NaN stays NaN.
  EXPECT_EQ(am::f32_to_bf16(1.0f), 0x3f80);
  float tie_even, tie_odd, above;
  std::uint32_t u = 0x3f808000u, v = 0x3f818000u, w = 0x3f808001u;
  std::memcpy(&tie_even, &u, 4);
  std::memcpy(&tie_odd, &v, 4);
  std::memcpy(&above, &w, 4);
  EXPECT_EQ(am::f32_to_bf16(tie_even), 0x3f80);
  EXPECT_EQ(am::f32_to_bf16(tie_odd), 0x3f82);
  EXPECT_EQ(am::f32_to_bf16(above), 0x3f81);
  EXPECT_TRUE(std::isnan(am::bf16_to_f32(am::f32_to_bf16(NAN))));
  EXPECT_EQ(am::f32_to_bf16(INFINITY), 0x7f80);
}

// ------------------------------------------------------------------------------------------
// Reading files Python wrote

TEST_F(Safetensors, PythonWrittenValuesDecodeExactly) {
  py({"gen", dir_.string()});
  json exp = json::parse(std::ifstream(dir_ / "expected.json"));
  auto f = am::SafetensorsFile::open(dir_ / "values.safetensors");
  EXPECT_EQ(f.metadata().at("note"), "made by make_safetensors.py");
  ASSERT_EQ(f.tensors().size(), 5u);
  for (const auto& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    expect_values(t, exp[t.name]);
  }
  EXPECT_EQ(f.at("empty.f32").nbytes, 0u);
  // Sorted by name, whatever the file's layout order.
  EXPECT_EQ(f.tensors().front().name, "all.bf16");
  EXPECT_EQ(f.tensors().back().name, "trunc.bf16");
}

TEST_F(Safetensors, PythonWrittenShardedCheckpoint) {
  py({"gen", dir_.string()});
  json exp = json::parse(std::ifstream(dir_ / "expected.json"));
  auto c = am::open_checkpoint(dir_ / "sharded");
  EXPECT_EQ(c.files().size(), 2u);
  EXPECT_EQ(c.total_size(), 26u);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"model.a", "model.b", "model.c"}));
  for (const auto& n : c.names()) expect_values(c.at(n), exp[n]);
  EXPECT_FALSE(c.contains("lm_head.weight"));
  EXPECT_NE(error_of([&] { c.at("lm_head.weight"); }).find("'lm_head.weight'"), std::string::npos);
}

// ------------------------------------------------------------------------------------------
// Writing, read back by Python and by us

struct Owned {
  std::vector<am::TensorView> views;
  std::vector<std::vector<std::byte>> store;
  void add(const std::string& name, am::DType dt, std::vector<std::int64_t> shape, unsigned seed) {
    am::TensorView t{name, dt, shape};
    std::size_t n = static_cast<std::size_t>(t.numel()) * am::dtype_size(dt);
    std::vector<std::byte> b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131 + seed * 17 + 7) & 0xff);
    store.push_back(std::move(b));
    t.nbytes = n;
    views.push_back(t);
  }
  // Pointers are fixed up at the end: `store` may reallocate while adding.
  std::vector<am::TensorView> done() {
    for (std::size_t i = 0; i < views.size(); ++i) views[i].data = store[i].data();
    return views;
  }
};

Owned sample() {
  Owned o;
  o.add("model.layers.0.self_attn.q_proj.bias", am::DType::BF16, {7}, 1);  // odd sizes: alignment
  o.add("model.norm.weight", am::DType::F16, {3}, 2);
  o.add("model.embed_tokens.weight", am::DType::F32, {5, 3}, 3);
  o.add("lm_head.weight", am::DType::BF16, {5, 3}, 4);
  o.add("scalar", am::DType::F32, {}, 5);
  o.add("empty", am::DType::F16, {0, 4}, 6);
  return o;
}

TEST_F(Safetensors, WrittenFileReadByPythonAndRoundTrips) {
  auto o = sample();
  auto tensors = o.done();
  am::write_safetensors(dir_ / "out.safetensors", tensors, {{"step", "12"}});
  json dumped = json::parse(py({"dump", (dir_ / "out.safetensors").string()}));
  EXPECT_EQ(dumped["metadata"], (json{{"format", "pt"}, {"step", "12"}}));
  ASSERT_EQ(dumped["tensors"].size(), tensors.size());
  for (const auto& t : tensors) {
    const auto& d = dumped["tensors"][t.name];
    EXPECT_EQ(d["dtype"], am::dtype_name(t.dtype)) << t.name;
    EXPECT_EQ(d["shape"], json(t.shape)) << t.name;
    EXPECT_EQ(d["hex"], bytes_hex(t.data, t.nbytes)) << t.name;
  }
  auto f = am::SafetensorsFile::open(dir_ / "out.safetensors");
  for (const auto& t : tensors) {
    const auto& r = f.at(t.name);
    EXPECT_EQ(r.dtype, t.dtype);
    EXPECT_EQ(r.shape, t.shape);
    ASSERT_EQ(r.nbytes, t.nbytes);
    EXPECT_TRUE(t.nbytes == 0 || std::memcmp(r.data, t.data, t.nbytes) == 0) << t.name;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r.data) % am::dtype_size(r.dtype), 0u) << t.name;
  }
  EXPECT_EQ(f.metadata().at("step"), "12");
  // No temp file is left next to the output.
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
  EXPECT_EQ(n, 1);
}

TEST_F(Safetensors, WriterIsReproducible) {
  auto o = sample();
  auto tensors = o.done();
  am::write_safetensors(dir_ / "a.safetensors", tensors);
  std::reverse(tensors.begin(), tensors.end());
  am::write_safetensors(dir_ / "b.safetensors", tensors);
  auto slurp = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(slurp(dir_ / "a.safetensors"), slurp(dir_ / "b.safetensors"));
}

TEST_F(Safetensors, ShardedRoundTripReadByPython) {
  auto o = sample();
  auto tensors = o.done();
  std::uint64_t total = 0;
  for (const auto& t : tensors) total += t.nbytes;
  // 64-byte shards: the 60-byte tensors get a shard each, the small ones share.
  auto files = am::write_checkpoint(dir_ / "ckpt", tensors, 64);
  ASSERT_GE(files.size(), 4u);
  const std::size_t k = files.size() - 1;
  char first[64];
  std::snprintf(first, sizeof first, "model-00001-of-%05zu.safetensors", k);
  EXPECT_EQ(files.front(), first);
  EXPECT_EQ(files.back(), "model.safetensors.index.json");

  json dumped = json::parse(py({"dump", (dir_ / "ckpt").string()}));  // checks total_size too
  EXPECT_EQ(dumped["index"]["metadata"]["total_size"], total);
  EXPECT_EQ(dumped["index"]["weight_map"].size(), tensors.size());
  EXPECT_EQ(dumped["shards"].size(), k);

  auto c = am::open_checkpoint(dir_ / "ckpt");
  EXPECT_EQ(c.total_size(), total);
  EXPECT_EQ(c.size(), tensors.size());
  for (const auto& t : tensors) {
    const auto& r = c.at(t.name);
    ASSERT_EQ(r.nbytes, t.nbytes);
    EXPECT_TRUE(t.nbytes == 0 || std::memcmp(r.data, t.data, t.nbytes) == 0) << t.name;
  }

  // Saving again as one file removes the shards and the index of the earlier save.
  files = am::write_checkpoint(dir_ / "ckpt", tensors, 1 << 20);
  EXPECT_EQ(files, (std::vector<std::string>{"model.safetensors"}));
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_ / "ckpt")) ++n;
  EXPECT_EQ(n, 1);
  EXPECT_EQ(am::open_checkpoint(dir_ / "ckpt").size(), tensors.size());
}

TEST_F(Safetensors, MappingOutlivesTheFileAndMoves) {
  auto o = sample();
  auto tensors = o.done();
  am::write_safetensors(dir_ / "x.safetensors", tensors);
  auto f = am::SafetensorsFile::open(dir_ / "x.safetensors");
  fs::remove(dir_ / "x.safetensors");  // the mapping keeps the inode alive
  am::SafetensorsFile g = std::move(f);
  const auto& t = g.at("model.embed_tokens.weight");
  EXPECT_EQ(std::memcmp(t.data, o.store[2].data(), t.nbytes), 0);
}

TEST_F(Safetensors, WriterRefusesBadInput) {
  auto o = sample();
  auto tensors = o.done();
  auto dup = tensors;
  dup.push_back(tensors[0]);
  EXPECT_NE(error_of([&] { am::write_safetensors(dir_ / "d.safetensors", dup); }).find("duplicate tensor name"), std::string::npos);
  auto bad = tensors;
  bad[1].nbytes += 2;
  EXPECT_NE(error_of([&] { am::write_safetensors(dir_ / "d.safetensors", bad); }).find("'model.norm.weight': nbytes"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "d.safetensors"));
}

// ------------------------------------------------------------------------------------------
// Malformed files: each refused with a message naming the file and the problem.

struct BadCase {
  const char* label;
  std::string header;
  std::string data;
  std::optional<std::uint64_t> len;
  const char* expect;
};

TEST_F(Safetensors, MalformedFilesAreRejected) {
  const std::string w8 = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::vector<BadCase> cases = {
      {"header past eof", w8, std::string(8, '\0'), 1000, "header length 1000 runs past the end of the file"},
      {"header absurd", "{}", "", 200'000'000, "exceeds the 100,000,000-byte limit"},
      {"not json", "{\"w\": ", "", {}, "header is not valid JSON"},
      {"bad utf8", "{\"w\xff\": 1}", "", {}, "header is not valid JSON"},
      {"not object", "[1,2]", "", {}, "header is not a JSON object"},
      {"entry not object", R"({"w":3})", "", {}, "tensor 'w': entry is not an object"},
      {"missing dtype", R"({"w":{"shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'), {}, "tensor 'w': missing dtype"},
      {"dtype mistyped", R"({"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'), {}, "tensor 'w': dtype is not a string"},
      {"unknown dtype", R"({"w":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'), {}, "tensor 'w': unknown dtype 'F31'"},
      {"unsupported dtype", R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0'), {}, "tensor 'w': unsupported dtype 'I64'"},
      {"missing shape", R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", std::string(8, '\0'), {}, "tensor 'w': missing shape"},
      {"shape mistyped", R"({"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", std::string(8, '\0'), {}, "tensor 'w': shape is not an array"},
      {"negative shape", R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0'), {}, "tensor 'w': shape has a dimension that is not a non-negative integer: -2"},
      {"float shape", R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", std::string(8, '\0'), {}, "not a non-negative integer: 2.0"},
      {"missing offsets", R"({"w":{"dtype":"F32","shape":[2]}})", std::string(8, '\0'), {}, "tensor 'w': missing data_offsets"},
      {"offsets mistyped", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", std::string(8, '\0'), {}, "tensor 'w': data_offsets is not [begin, end]"},
      {"negative offset", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", std::string(8, '\0'), {}, "tensor 'w': data_offsets is not [begin, end]"},
      {"offsets past buffer", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0'), {}, "tensor 'w': data_offsets end 8 is past the data buffer (4 bytes)"},
      {"begin after end", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", std::string(8, '\0'), {}, "tensor 'w': data_offsets begin 8 > end 4"},
      {"size mismatch", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'), {}, "tensor 'w': data_offsets span 8 bytes but shape [3] of F32 needs 12"},
      {"shape overflow", R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", std::string(8, '\0'), {}, "needs more"},
      {"overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       std::string(12, '\0'), {}, "tensor 'b' [4, 12) overlaps tensor 'a'"},
      {"gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       std::string(12, '\0'), {}, "tensor 'b' starts at 8, leaving a gap after byte 4"},
      {"trailing", w8, std::string(12, '\0'), {}, "4 trailing bytes after the last tensor"},
      {"duplicate tensor", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       std::string(8, '\0'), {}, "header has duplicate key 'w'"},
      {"metadata value", R"({"__metadata__":{"k":1}})", "", {}, "__metadata__ value for 'k' is not a string"},
      {"metadata mistyped", R"({"__metadata__":[1]})", "", {}, "__metadata__ is not an object"},
      {"extra field", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", std::string(8, '\0'), {}, "tensor 'w': unexpected field 'x'"},
      {"deep nesting", std::string(100, '[') + std::string(100, ']'), "", {}, "nests deeper than 64"},
  };
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    auto p = raw("bad" + std::to_string(i++) + ".safetensors", c.header, c.data, c.len);
    std::string msg = error_of([&] { am::SafetensorsFile::open(p); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  }
  // Sanity: the well-formed base case opens, padded with spaces too.
  EXPECT_EQ(am::SafetensorsFile::open(raw("good.safetensors", w8 + "       ", std::string(8, '\0'))).tensors().size(), 1u);
}

TEST_F(Safetensors, TruncatedFiles) {
  write_text(dir_ / "empty.safetensors", "");
  write_text(dir_ / "five.safetensors", "abcde");
  for (const char* n : {"empty.safetensors", "five.safetensors"}) {
    std::string msg = error_of([&] { am::SafetensorsFile::open(dir_ / n); });
    EXPECT_NE(msg.find("shorter than the 8-byte header length"), std::string::npos) << msg;
    EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
  // A valid file cut short inside its data: the offsets now run past the buffer.
  auto o = sample();
  auto tensors = o.done();
  am::write_safetensors(dir_ / "cut.safetensors", tensors);
  fs::resize_file(dir_ / "cut.safetensors", fs::file_size(dir_ / "cut.safetensors") - 3);
  EXPECT_NE(error_of([&] { am::SafetensorsFile::open(dir_ / "cut.safetensors"); }).find("past the data buffer"), std::string::npos);
  EXPECT_NE(error_of([&] { am::SafetensorsFile::open(dir_ / "nope.safetensors"); }).find("cannot open"), std::string::npos);
}

TEST_F(Safetensors, MalformedIndexesAreRejected) {
  const std::string w8 = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  raw("s1.safetensors", w8, std::string(8, '\0'));
  const fs::path idx = dir_ / "model.safetensors.index.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"weight_map":{"w":"s1.safetensors","v":"s2.safetensors"}})", "maps tensor 'v' to missing shard 's2.safetensors'"},
      {R"({"weight_map":{"w":"s1.safetensors","u":"s1.safetensors"}})", "maps tensor 'u' to shard 's1.safetensors', which does not contain it"},
      {R"({"weight_map":{"w":"s1.safetensors","w":"s1.safetensors"}})", "index has duplicate key 'w'"},
      {R"({"weight_map":{"w":"../s1.safetensors"}})", "not a file name in the index's directory"},
      {R"({"weight_map":{"w":7}})", "weight_map entry for tensor 'w' is not a string"},
      {R"({"metadata":{"total_size":-1},"weight_map":{"w":"s1.safetensors"}})", "total_size is not a non-negative integer"},
      {R"({"metadata":{}})", "no weight_map object"},
      {R"({"weight_map":)", "index is not valid JSON"},
  };
  for (const auto& [text, expect] : cases) {
    SCOPED_TRACE(text);
    write_text(idx, text);
    std::string msg = error_of([&] { am::open_checkpoint(dir_); });
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
    EXPECT_NE(msg.find(idx.string()), std::string::npos) << msg;
  }
  // A broken shard is reported with the shard's own name.
  write_text(dir_ / "s3.safetensors", "xyz");
  write_text(idx, R"({"weight_map":{"w":"s3.safetensors"}})");
  EXPECT_NE(error_of([&] { am::open_checkpoint(dir_); }).find("s3.safetensors: file is 3 bytes"), std::string::npos);
  // Valid index: total_size taken from the index (float form accepted).
  write_text(idx, R"({"metadata":{"total_size":8.0},"weight_map":{"w":"s1.safetensors"}})");
  EXPECT_EQ(am::open_checkpoint(dir_).total_size(), 8u);

  fs::remove(idx);
  EXPECT_NE(error_of([&] { am::open_checkpoint(dir_); }).find("no model.safetensors or model.safetensors.index.json"), std::string::npos);
}

}  // namespace
