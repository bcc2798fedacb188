#pragma once
// Values for the collective tests (dist_test.cpp, dist_mpi_check.cpp): their sum depends on the
// order of addition (big + 1 == big in the type, so (big + 1) - big == 0 while
// (big - big) + 1 == 1), which is what makes "summed in rank order" checkable.
#include <cmath>
#include <cstddef>

namespace azr::testing {

template <typename T>
T order_sensitive_value(int r, std::size_t i) {
  const T big = sizeof(T) == 4 ? T(1e8) : T(1e17);
  if (r >= 3) return T(r) * T(0.1);
  switch (i % 4) {
    case 0: return r == 0 ? big : r == 1 ? T(1) : -big;
    case 1: return r == 0 ? T(1) : r == 1 ? big : -big;
    case 2: return r == 0 ? -big : r == 1 ? T(3) : big;
    default: {
      const auto mant = static_cast<long long>((i * 2654435761ull + static_cast<unsigned>(r) * 40503ull) % 2001) - 1000;
      return static_cast<T>(static_cast<double>(mant) * std::pow(10.0, static_cast<int>((i + static_cast<std::size_t>(r)) % 13) - 6));
    }
  }
}

}  // namespace azr::testing
