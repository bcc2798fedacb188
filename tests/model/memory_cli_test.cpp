// `azr memory` through the real binary: the plan of a real Qwen2.5 config, the exit codes
// (0 fits, 1 does not, 2 bad input) and the error messages.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace {

using azr::testing::run_process;
using nlohmann::json;

std::string azr() { return azr::testing::env_or_fail("AZR_BIN"); }
std::string config(const std::string& size) {
  return azr::testing::env_or_fail("AZR_TESTS_DIR") + "/model/configs/qwen2.5-" + size + ".json";
}

TEST(MemoryCli, JsonPlanOfQwenOneAndAHalfB) {
  const auto r = run_process({azr(), "memory", config("1.5b"), "--seq-len", "4096", "--kv-slots", "256",
                              "--kv-capacity", "4096", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["parameters"], 1543714304);
  EXPECT_EQ(j["precision"], "bf16-mixed");
  EXPECT_GE(j["micro_batch"].get<int64_t>(), 1);  // chosen: the largest that fits 80 GiB
  EXPECT_EQ(j["bytes"]["kv_cache"].get<double>(), 28.0 * (1ull << 30));  // 2 x 28 x 256 x 4096 x 256 x 2 B
  EXPECT_LE(j["bytes"]["training_peak"].get<double>(), j["budget_bytes"].get<double>());
  EXPECT_TRUE(j["fits"]);
}

TEST(MemoryCli, TableForAPresetAndAModelDirectory) {
  const auto preset = run_process({azr(), "memory", "azr-tiny", "--precision", "fp32", "--micro-batch", "4"});
  ASSERT_EQ(preset.exit_code, 0) << preset.err;
  EXPECT_NE(preset.out.find("peak: training"), std::string::npos) << preset.out;
  EXPECT_NE(preset.out.find("fp32, micro-batch 4"), std::string::npos) << preset.out;
  const std::string dir = azr::testing::env_or_fail("AZR_TESTS_DIR") + "/../models/quickstart";
  const auto model_dir = run_process({azr(), "memory", dir, "--seq-len", "512"});
  EXPECT_EQ(model_dir.exit_code, 0) << model_dir.err;
  EXPECT_NE(model_dir.out.find("peak: training"), std::string::npos) << model_dir.out;
  // The plan counts the directory's model: its parameters are the tensors' elements, summed here
  // from the safetensors header itself (8 bytes of length, then JSON), not through azr's reader.
  std::ifstream weights(dir + "/model.safetensors", std::ios::binary);
  uint64_t header_bytes = 0;
  weights.read(reinterpret_cast<char*>(&header_bytes), 8);  // little-endian, as this machine
  std::string header(header_bytes, '\0');
  weights.read(header.data(), std::streamsize(header_bytes));
  ASSERT_TRUE(weights) << dir;
  int64_t elements = 0;
  const json tensors = json::parse(header);
  for (const auto& [name, tensor] : tensors.items()) {
    if (name == "__metadata__") continue;
    int64_t n = 1;
    for (const json& d : tensor.at("shape")) n *= d.get<int64_t>();
    elements += n;
  }
  const auto as_json = run_process({azr(), "memory", dir, "--seq-len", "512", "--json"});
  ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
  EXPECT_GT(elements, 0);
  EXPECT_EQ(json::parse(as_json.out).at("parameters").get<int64_t>(), elements) << as_json.out;
}

TEST(MemoryCli, TooSmallABudgetExitsOne) {
  const auto r = run_process({azr(), "memory", config("1.5b"), "--budget-gib", "16"});  // 18 B/param = 25.9 GiB
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("not even one sequence"), std::string::npos) << r.out;
  const auto fixed = run_process({azr(), "memory", config("1.5b"), "--budget-gib", "16", "--micro-batch", "1"});
  EXPECT_EQ(fixed.exit_code, 1);
  EXPECT_NE(fixed.out.find("DOES NOT FIT"), std::string::npos) << fixed.out;
}

// azr-tiny's max_position_embeddings is 4096 (model/presets.cpp): a longer sequence or KV cache is
// planned, and named on stderr; the default --kv-capacity is --seq-len, so both are named.
TEST(MemoryCli, PositionsPastTheTrainedContextAreNamed) {
  const auto within = run_process({azr(), "memory", "azr-tiny", "--seq-len", "4096"});
  EXPECT_EQ(within.exit_code, 0) << within.err;
  EXPECT_EQ(within.err.find("max_position_embeddings"), std::string::npos) << within.err;
  const auto past = run_process({azr(), "memory", "azr-tiny", "--seq-len", "4097"});
  EXPECT_EQ(past.exit_code, 0) << past.err;
  EXPECT_NE(past.err.find("--seq-len 4097 passes the model's max_position_embeddings (4096)"), std::string::npos)
      << past.err;
  EXPECT_NE(past.err.find("--kv-capacity 4097"), std::string::npos) << past.err;
  const auto cache = run_process({azr(), "memory", "azr-tiny", "--seq-len", "512", "--kv-capacity", "8192"});
  EXPECT_EQ(cache.err.find("--seq-len"), std::string::npos) << cache.err;
  EXPECT_NE(cache.err.find("--kv-capacity 8192 passes"), std::string::npos) << cache.err;
}

// The reserve beside the plan's terms is the device's: the GPU's 2 GiB (CUDA context, workspace,
// fragmentation) planned a 0.77M-parameter model out of 1 GiB on the CPU, which holds 0.5 GiB.
TEST(MemoryCli, TheReserveIsTheDevicesOwn) {
  const std::vector<std::string> plan = {azr(), "memory", "azr-tiny", "--precision", "fp32", "--seq-len", "512",
                                         "--micro-batch", "1", "--budget-gib", "1", "--json"};
  const auto gpu = run_process(plan);
  EXPECT_EQ(gpu.exit_code, 1) << gpu.err;  // does not fit
  const json g = json::parse(gpu.out);
  EXPECT_EQ(g["device"], "cuda");
  EXPECT_EQ(g["bytes"]["reserve"].get<double>(), 2.0 * (1ull << 30));
  std::vector<std::string> on_cpu = plan;
  on_cpu.insert(on_cpu.end(), {"--device", "cpu"});
  const auto cpu = run_process(on_cpu);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  const json c = json::parse(cpu.out);
  EXPECT_EQ(c["bytes"]["reserve"].get<double>(), 0.5 * (1ull << 30));
  EXPECT_EQ(c["bytes"]["training_peak"].get<double>(), g["bytes"]["training_peak"].get<double>() - 1.5 * (1ull << 30));
  EXPECT_TRUE(c["fits"]);
  const auto bad = run_process({azr(), "memory", "azr-tiny", "--device", "tpu"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--device"), std::string::npos) << bad.err;
}

TEST(MemoryCli, BadInputIsAUsageError) {
  const auto precision = run_process({azr(), "memory", "azr-tiny", "--precision", "fp16"});
  EXPECT_EQ(precision.exit_code, 2);
  EXPECT_NE(precision.err.find("--precision"), std::string::npos) << precision.err;
  const auto unknown = run_process({azr(), "memory", "no-such-model"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("no-such-model"), std::string::npos) << unknown.err;
  const auto seq = run_process({azr(), "memory", "azr-tiny", "--seq-len", "0"});
  EXPECT_EQ(seq.exit_code, 2);
  // A path that names nothing was reported as an unknown preset.
  const auto missing = run_process({azr(), "memory", "/nonexistent/config.json"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent/config.json: no such model directory or config.json (the presets: azr-tiny"),
            std::string::npos)
      << missing.err;
  // 1e308 GiB planned against an infinite budget: "fits", a micro-batch of 2^30.
  const auto huge = run_process({azr(), "memory", "azr-tiny", "--budget-gib", "1e308"});
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_NE(huge.err.find("--budget-gib: 1e308 is too large: it must be greater than 0, at most 1048576"), std::string::npos)
      << huge.err;
  // Past what the GPU kernels take in one micro-batch (2,097,120 tokens / 4,120 = 509 sequences),
  // as azr train refuses it.
  const auto past = run_process({azr(), "memory", "azr-tiny", "--seq-len", "4120", "--micro-batch", "510"});
  EXPECT_EQ(past.exit_code, 2);
  EXPECT_NE(past.err.find("memory: --seq-len 4120, --micro-batch 510: 510 sequences of up to 4120 tokens are past "
                          "the 509 one micro-batch can hold"),
            std::string::npos)
      << past.err;
  const auto longest = run_process({azr(), "memory", "azr-tiny", "--seq-len", "4000000", "--budget-gib", "1000"});
  EXPECT_EQ(longest.exit_code, 2);
  EXPECT_NE(longest.err.find("a sequence of up to 4000000 tokens is past what one micro-batch can hold"),
            std::string::npos)
      << longest.err;
}

}  // namespace
