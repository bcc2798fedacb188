#include "eval/pass_at_k.h"

#include <stdexcept>
#include <string>

namespace azr::eval {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (k < 1 || k > n || c < 0 || c > n)
    throw std::invalid_argument("pass_at_k: need 1 <= k <= n and 0 <= c <= n (n=" + std::to_string(n) +
                                ", c=" + std::to_string(c) + ", k=" + std::to_string(k) + ")");
  if (n - c < k) return 1.0;  // every k-subset holds a correct sample
  double fail = 1.0;          // C(n-c, k) / C(n, k)
  for (int64_t i = n - c + 1; i <= n; ++i) fail *= 1.0 - double(k) / double(i);
  return 1.0 - fail;
}

}  // namespace azr::eval
