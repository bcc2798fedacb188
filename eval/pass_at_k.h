#pragma once
// The unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language Models Trained on
// Code"): with n samples of which c are correct, pass@k = 1 - C(n-c, k) / C(n, k), computed in
// the stable product form 1 - prod_{i=n-c+1}^{n} (1 - k / i) (no binomials, no overflow).
#include <cstdint>

namespace azr::eval {

// Throws std::invalid_argument unless 1 <= k <= n and 0 <= c <= n. n - c < k gives exactly 1.
double pass_at_k(int64_t n, int64_t c, int64_t k);

}  // namespace azr::eval
