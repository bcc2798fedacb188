#pragma once
// One attention test case (shape, ragged lengths, scale of q and k), named for gtest, shared by the
// CUDA op tests (cuda_ops_test.cpp) and the tensor-core kernels on the device emulation
// (tensor_core_emulated_test.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace azr::kernels::testing {

struct AttnCase {
  int64_t B, T, H, KV, d;
  std::vector<int32_t> lengths;  // empty = all T
  float qk_scale = 1.f;          // of the random queries and keys: 4 makes most rows' softmax peaked
};

// gtest names the cases with this, so test names stay stable (not the bytes of a vector).
inline std::string attn_case_name(const ::testing::TestParamInfo<AttnCase>& info) {
  const AttnCase& c = info.param;
  std::string name = "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_H" + std::to_string(c.H) + "_KV" +
                     std::to_string(c.KV) + "_d" + std::to_string(c.d);
  return name + (c.lengths.empty() ? "_full" : "_ragged") + (c.qk_scale != 1.f ? "_peaked" : "");
}

inline void PrintTo(const AttnCase& c, std::ostream* os) { *os << attn_case_name({c, 0}); }

}  // namespace azr::kernels::testing
