#pragma once
// `azr train`: a run from start to end (or to Ctrl-C), on one process or many.
//
//   run dir      config.toml (resolved), buffer.db, metrics.jsonl, events.out.tfevents.*,
//                log.txt, checkpoints/step-N/ (see trainer/checkpoint.h)
//   start        a new model (preset) or a Hugging Face checkpoint; the seeding phase grows the
//                buffer from the identity seed with no updates, then checkpoint step-0
//   each step    trainer/step.h; metrics to every sink; periodic evaluation and checkpoints
//   resume       from the newest complete checkpoint: weights, optimizer, data RNG and the
//                buffer snapshot are restored, metrics.jsonl is cut back to that step, and the
//                run continues exactly as if it had never stopped (CPU)
//   Ctrl-C       (SIGINT or SIGTERM) the current step finishes, a checkpoint is written, exit 130
#include <string>
#include <vector>

#include "trainer/model_setup.h"

namespace azr::trainer {

struct TrainOptions {
  std::string config_path;                // a TOML file (not with resume_dir)
  std::vector<std::string> overrides;     // --set key=value
  std::string run_dir;                    // --run-dir (wins over run.run_dir)
  std::string resume_dir;                 // --resume RUN_DIR: config from RUN_DIR/config.toml
  std::string comm_backend = "auto";      // --dist auto|single|mpi|tcp
  double dist_timeout_s = 1800;           // --dist-timeout: the TCP backend's wait for a silent peer
};

// Exit codes: 0 finished, 130 stopped by a signal after checkpointing. Errors the user can fix
// (config, paths, a run dir that already holds a run) throw UserError (trainer/model_setup.h);
// others std::exception.
int train(const TrainOptions& options);

}  // namespace azr::trainer
