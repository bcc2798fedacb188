#pragma once
// What `azr train` and `azr bootstrap` both do with [model]: make the starting model and its
// tokenizer, and write the tokenizer beside a saved model.
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "model/adamw.h"
#include "model/chat_format.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "trainer/config.h"

namespace azr::trainer {

// Errors the user can fix (config, paths, a directory that already holds a run or a model):
// the commands print the message and exit 2.
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A directory a command will make (a run directory, a bootstrap's output) that cannot be made: a
// file in its place or on its path, a parent that cannot be written. Said before the model loads,
// which for a real model takes minutes, where create_directories' own error came after it (for
// `azr bootstrap`, after all its work) and named neither the flag nor the key. Throws UserError,
// `what` + the reason; `what` names the directory and where it was set.
void refuse_a_directory_that_cannot_be_made(const std::filesystem::path& dir, const std::string& what);

// model.device's op table; a rank passes its local rank (its GPU with "cuda"). UserError when the
// device cannot be used here (no CUDA in this build, no GPU), saying why.
const kernels::Ops& model_backend(const TrainConfig& config, int local_rank = 0);
// A Hugging Face directory, loaded into `ops`' memory; a bad one throws UserError naming the file
// and field or tensor.
model::Transformer load_model_dir(const std::filesystem::path& dir, const kernels::Ops& ops = kernels::cpu_ops());
// model.preset: a new model, initialised from the run seed; else model.path. In `ops`' memory,
// with model.recompute applied.
model::Transformer initial_model(const TrainConfig& config, const kernels::Ops& ops = kernels::cpu_ops());
// algorithm.micro_batch_size with 0 resolved: the largest micro-batch of max_prompt_tokens +
// max_response_tokens sequences whose training peak in the memory plan (model/memory_plan.h,
// `azr memory`) fits model.memory_gib, or the device's memory when that is 0. `note` is the log
// line saying how it was chosen; for a size the config gave, "" or a warning that its plan passes
// that memory. Throws UserError when not even one sequence fits, or a micro-batch is past the GPU
// kernels' limit (model::micro_batch_limit), with the numbers.
struct MicroBatchChoice {
  int size = 1;
  std::string note;
};
MicroBatchChoice resolve_micro_batch(const TrainConfig& config, int local_rank = 0, int local_ranks = 1);
// The optimizer [algorithm] describes: lr, betas, eps, weight decay.
model::AdamWSettings adamw_settings(const TrainConfig& config);
// The ModelConfig of model.preset or model.path/config.json. Throws UserError.
model::ModelConfig model_config(const TrainConfig& config);
// The byte tokenizer for a preset without model.tokenizer; else model.tokenizer (a file or its
// directory) or model.path/tokenizer.json. Throws UserError.
std::unique_ptr<model::Tokenizer> make_tokenizer(const TrainConfig& config);
// The tokenizer.json a model directory carries: the byte tokenizer rendered, or the bytes of the
// file make_tokenizer read. A run reads it once at start, so every checkpoint holds what the run
// loaded, even when that file changes or goes away (a resume from a pruned checkpoint's copy).
std::string tokenizer_json(const TrainConfig& config, const model::Tokenizer& tokenizer);
// A resume trains the checkpoint's weights with the tokenizer they were trained with: the file
// make_tokenizer reads (model.tokenizer, else model.path/tokenizer.json) must hold the bytes the
// run copied into the checkpoint (dir/tokenizer.json; an older checkpoint without one is not
// checked). One that changed since re-maps token ids under the weights, silently. Throws
// UserError naming both files. Nothing to check for a preset's byte tokenizer.
// `loaded` is the file's bytes as the run read them (tokenizer_json).
void refuse_a_tokenizer_unlike_the_checkpoints(const TrainConfig& config, const std::string& loaded,
                                               const std::filesystem::path& checkpoint);
// algorithm.prompt_style as the task engine's enum (the config has already checked the name).
model::PromptStyle prompt_style(const TrainConfig& config);
// A model made by `azr bootstrap` records the prompt wording it learned ("prompt_style" in
// model.path/bootstrap.json); training it with the other wording throws its warm start away.
// A warning line when algorithm.prompt_style differs from that record, else "" (no model.path,
// no record, or an unreadable one: the record is advice, not a requirement).
std::string prompt_style_warning(const TrainConfig& config);

}  // namespace azr::trainer
