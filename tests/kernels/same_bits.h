#pragma once
// Whether two float vectors hold the same values bit for bit: the kernels' "same bits" checks
// (a fused op against the ops it fuses, a fast path against the path it skips).
#include <cstring>
#include <vector>

namespace azr::kernels::testing {

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace azr::kernels::testing
