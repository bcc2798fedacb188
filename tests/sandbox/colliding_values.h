#pragma once
// Values Python's hash files under one hash, for the equality tests and value_equal_bench.
#include <cstdint>

#include "sandbox/value.h"

namespace azr::sandbox::testing {

// k * (2**61 - 1) as an int: Python hashes every one of them to 0 (sys.hash_info.modulus).
inline Value multiple_of_hash_modulus(uint32_t k) {
  BigInt n;
  uint64_t carry = 0;
  for (const uint64_t limb : {0xffffffffULL, 0x1fffffffULL}) {  // 2**61 - 1, 32 bits a limb
    const uint64_t product = limb * k + carry;
    n.limbs.push_back(static_cast<uint32_t>(product));
    carry = product >> 32;
  }
  n.limbs.push_back(static_cast<uint32_t>(carry));
  while (!n.limbs.empty() && n.limbs.back() == 0) n.limbs.pop_back();
  if (const auto small = n.to_i64()) return Value::integer(*small);
  return Value::integer(n);
}

}  // namespace azr::sandbox::testing
