#pragma once
// Checkpoints: RUN_DIR/checkpoints/step-N/ holds everything a run needs to continue exactly:
//   config.json, model.safetensors   the weights, Hugging Face format (loads in other tools)
//   tokenizer.json                   so the directory is a complete model
//   optimizer.safetensors            AdamW moments and step
//   buffer.db                        a consistent copy of the task buffer at the end of step N
//   trainer_state.json               step, run seed, the data RNG's state, world size, buffer counts
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
