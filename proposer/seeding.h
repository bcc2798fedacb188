#pragma once
// The seeding phase (azr-reference §8.2, METHOD.md "Buffers start from a single seed"): starting
// from the identity function, the model proposes tasks with no parameter updates; the sandbox
// validates them and the valid ones grow the buffers until each type holds `target` tasks.
//
// The model enters as a function from prompts to generations, so the phase runs with any engine
// (the CPU transformer, later the GPU one) and is tested with scripted responses.
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "buffer/task_buffer.h"
#include "model/chat_format.h"
#include "proposer/parse.h"
#include "proposer/validate.h"

namespace azr::proposer {

// prompts -> one generation per prompt (the text after the prompt's "<think>").
using GenerateFn = std::function<std::vector<std::string>(const std::vector<std::string>& prompts)>;

struct SeedingSettings {
  int64_t target = 256;  // tasks per type (the paper: B * 4 = 256)
  int batch = 64;        // proposer prompts per type and round
  int k = 6;             // references per deduction/abduction prompt (fewer while the buffer is small)
  int max_rounds = 100;  // stop even if a type never reaches the target (a model that proposes nothing valid)
  uint64_t seed = 0;     // reference sampling
  model::PromptStyle prompt_style = model::PromptStyle::Paper;
  ParseOptions parse;
  ValidateSettings validate;
  // Asked before each type's batch of a round; true ends seeding there (a signal: azr train
  // stops). Empty = never.
  std::function<bool()> stop;
};

struct SeedingReport {
  int rounds = 0;
  int64_t proposals = 0;
  int64_t inserted[3] = {0, 0, 0};       // by buffer::TaskType
  int64_t duplicates = 0;
  std::map<std::string, int64_t> rejected;  // reason -> count
  bool reached_target = false;
  bool stopped = false;  // settings.stop said so
};

// Inserts the identity seeds into an empty buffer, then runs rounds of: per type, `batch`
// proposer prompts (deduction/abduction with up to k references from that type's buffer;
// induction showing one program drawn from deduction ∪ abduction, weighted by their sizes) ->
// generate -> parse -> validate -> insert (origin Seed, step 0; the buffer de-duplicates).
// Types already at the target are skipped.
// The task whose program an induction proposer prompt shows: drawn from deduction or abduction
// in proportion to their sizes (the reference draws from input ∪ output). Used by seeding and by
// the trainer's steps.
buffer::Task induction_source(const buffer::TaskBuffer& buffer, std::mt19937_64& rng);

SeedingReport grow_seed_buffer(buffer::TaskBuffer& buffer, sandbox::Pool& pool, const GenerateFn& generate,
                               const SeedingSettings& settings = {});

}  // namespace azr::proposer
