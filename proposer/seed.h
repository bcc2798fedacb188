#pragma once
// The zero-data starting point (azr-reference §8.2, METHOD.md "Buffers start from a single
// seed"): the identity function, from which the model itself proposes the initial buffer.
#include <vector>

#include "buffer/task_buffer.h"

namespace azr::proposer {

// `def f(a):\n    return a` with input 'Hello world' (deduction and abduction). For induction the
// same program with six (input, output) pairs and the message "Write a function that returns
// whatever you input". azr decision: the reference's third input `dict(a=1, b=2)` is a call, which
// azr's literal-only inputs refuse; it is written as the literal {'a': 1, 'b': 2}.
buffer::Task identity_seed(buffer::TaskType type);

// The three seeds, one per type, origin Seed, step 0.
std::vector<buffer::Task> identity_seeds();

}  // namespace azr::proposer
