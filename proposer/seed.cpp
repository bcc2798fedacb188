#include "proposer/seed.h"

namespace azr::proposer {

buffer::Task identity_seed(buffer::TaskType type) {
  buffer::Task t;
  t.type = type;
  t.origin = buffer::Origin::Seed;
  t.step = 0;
  t.program = "def f(a):\n    return a";
  if (type == buffer::TaskType::Induction) {
    // Inputs and their reprs (the outputs) written out by hand.
    t.inputs = {"'Hello world'", "1", "{'a': 1, 'b': 2}", "(1.1, 1.2, 1.3)", "'[[1, 0], [0, 1]]'", "1001101100010001"};
    t.outputs = t.inputs;  // the identity returns its argument, whose repr is the literal itself
    t.message = "Write a function that returns whatever you input";
  } else {
    t.input = "'Hello world'";
    t.output = "'Hello world'";
  }
  return t;
}

std::vector<buffer::Task> identity_seeds() {
  return {identity_seed(buffer::TaskType::Deduction), identity_seed(buffer::TaskType::Abduction),
          identity_seed(buffer::TaskType::Induction)};
}

}  // namespace azr::proposer
