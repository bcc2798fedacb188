#pragma once
// Checkpoints: RUN_DIR/checkpoints/step-N/ holds everything a run needs to continue exactly:
//   config.json, model.safetensors   the weights, Hugging Face format (loads in other tools)
//   tokenizer.json                   so the directory is a complete model
//   optimizer.safetensors            AdamW moments and step
//   buffer.db                        a consistent copy of the task buffer at the end of step N
//   trainer_state.json               step, run seed, the data RNG's state, world size, buffer counts,
//                                    the stop rules' steps in a row
//   checksums.xxh128                 every other file's XXH3-128, in the format of xxh128sum
//                                    (Debian's xxhash): `xxh128sum -c checksums.xxh128` in the
//                                    directory checks a copy; a resume checks it first
// A checkpoint is written into a temporary sibling directory, every file is fsync'ed, and the
// directory is renamed into place: a crash at any moment leaves either the whole checkpoint or
// none (a left-over .tmp directory is ignored and cleaned up).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace azr::trainer {

struct TrainerState {
  int64_t step = 0;
  uint64_t seed = 0;
  std::string data_rng;       // std::mt19937_64's text state
  int world_size = 1;
  int64_t buffer_tasks[3] = {0, 0, 0};  // by task type, to check the restored buffer
  // The stop rules' counts of steps in a row (trainer.cpp: a gradient that is not finite; the
  // sandbox losing every result of the proposer's or the solver's), so that a resumed run stops
  // where the run would have. Absent from checkpoints written before them: 0.
  int not_finite_in_a_row = 0, proposer_lost_in_a_row = 0, solver_lost_in_a_row = 0;
  // The run's algorithm.prompt_style: the wording the checkpoint's model learned, which `azr
  // eval` takes as its template and `azr train` checks a new run on this model against
  // (model::learned_prompt_style). Not read back on resume (the config holds it). "" = not written.
  std::string prompt_style;
};

std::string trainer_state_json(const TrainerState& s);
// Throws std::runtime_error naming the file.
TrainerState read_trainer_state(const std::filesystem::path& file);

// Writes checkpoints/step-N. `write_contents(dir)` writes the model, tokenizer, optimizer and
// buffer files into the temporary directory; this function adds trainer_state.json, syncs, renames
// and then deletes all but the newest `keep_last` checkpoints (0 = keep all). Returns the final path.
std::filesystem::path write_checkpoint(const std::filesystem::path& run_dir, const TrainerState& state,
                                       const std::function<void(const std::filesystem::path&)>& write_contents,
                                       int keep_last);

// The name of a checkpoint's checksum manifest.
inline constexpr const char* kChecksumsFile = "checksums.xxh128";

// Writes dir/checksums.xxh128: one line per regular file in `dir` (but the manifest), by name,
// `<32 hex digits>  <name>` as xxh128sum prints them. Throws std::runtime_error naming a file it
// cannot read.
void write_checksums(const std::filesystem::path& dir);

// Checks every file the manifest names against its checksum, and that every file in `dir` is
// named. Throws std::runtime_error naming the first file that is missing, differs from its
// checksum or is not in the manifest, an empty manifest, or a line that is not one of
// write_checksums'. Returns false, checking nothing, for a checkpoint without a manifest written
// before azr wrote them; a later one's trainer_state.json names its manifest ("checksums"), and
// without it the checkpoint is refused.
bool verify_checksums(const std::filesystem::path& dir);

// Complete checkpoints (step-N with a trainer_state.json), oldest first.
std::vector<std::pair<int64_t, std::filesystem::path>> list_checkpoints(const std::filesystem::path& run_dir);
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// `text` as the whole of `file`, on disk (fsync) before this returns; throws std::runtime_error
// naming the file when the write or the sync fails.
void write_synced(const std::filesystem::path& file, const std::string& text);

// fsync of a file or directory; throws std::runtime_error naming the path when it cannot be
// opened or the fsync fails (EINVAL, a filesystem that cannot sync directories, is not a failure).
void sync_path(const std::filesystem::path& p);

}  // namespace azr::trainer
