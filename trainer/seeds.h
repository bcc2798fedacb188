#pragma once
// Every random choice of a run derives from the run seed and where it happens (step, phase, the
// item's index in the step's global batch), never from which rank does the work or in what
// order. So a sequence samples the same tokens on one process or eight, and a resumed run
// repeats exactly what the uninterrupted one did.
#include <cstdint>
#include <initializer_list>

namespace azr::trainer {

// Phases of a step that draw sampling seeds.
enum class SeedPhase : uint64_t { Seeding = 1, Propose = 2, Learnability = 3, Solve = 4, Data = 5, Bootstrap = 6, Heldout = 7 };

// splitmix64's finaliser: a bijection that spreads every input bit over the output.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t derive_seed(uint64_t run_seed, std::initializer_list<uint64_t> parts) {
  uint64_t h = mix64(run_seed);
  for (uint64_t p : parts) h = mix64(h ^ mix64(p));
  return h;
}

}  // namespace azr::trainer
