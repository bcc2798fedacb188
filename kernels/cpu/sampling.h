#pragma once
// One sampling decision on one row of logits, on the host: the reference behind the CPU
// backend's sample_rows op (kernels/ops.h) and model::sample_token (model/generate.h), which
// the CUDA op is checked against.
#include <cstdint>

namespace azr::kernels {

// Samples an id below V from logits[0, V) with a uniform draw u in [0, 1): temperature (0 =
// greedy), then top-k (0 = off), then top-p ((0, 1]), renormalised; writes the token's log-prob
// under the distribution it was drawn from (greedy: at temperature 1). Probabilities and sums in
// double; the top-k/top-p candidates are walked by descending probability, ties by id. Arguments
// are not checked (model::sample_token checks its parameters; ops.h lists the preconditions).
int32_t sample_row(const float* logits, int64_t V, float temperature, int32_t top_k, float top_p, double u,
                   float* logprob);

}  // namespace azr::kernels
