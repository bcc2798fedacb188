// azr train: the self-play loop from a TOML config (trainer/trainer.h does the work).
#include "cli/commands.h"
#include "cli/number_checks.h"
#include "trainer/bootstrap_run.h"
#include "trainer/trainer.h"

namespace azr::cli {

CLI::App* add_train_command(CLI::App& app, TrainCommandOptions& o) {
  CLI::App* c = app.add_subcommand("train", "Run self-play training from a TOML config (or resume a run)");
  c->footer(
      "Writes RUN_DIR/{config.toml, buffer.db, metrics.jsonl, events.out.tfevents.*, log.txt, checkpoints/step-N}. "
      "Ctrl-C finishes the current step, writes a checkpoint and exits with 130 (in seeding, before the first "
      "checkpoint, it stops there and removes the new run); --resume RUN_DIR continues from the newest checkpoint "
      "exactly. Multi-process: launch with mpirun, srun or torchrun-style RANK/WORLD_SIZE/"
      "MASTER_ADDR/MASTER_PORT variables; every rank runs the same command.\n"
      "Exit status: 0 done, 1 failed, 2 bad config or usage, 130 stopped by a signal.");
  c->add_option("config", o.config, "the run config (TOML), e.g. configs/quickstart.toml")->check(non_empty_path());
  // One value per --set, so a CONFIG.toml after it is the positional, not another override.
  c->add_option("--set", o.overrides, "override a config key: --set algorithm.lr=1e-5 (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--run-dir", o.run_dir, "the run directory (default: run.run_dir, else runs/<run.name>)")
      ->check(non_empty_path());
  c->add_option("--resume", o.resume, "continue the run in this directory from its newest checkpoint")
      ->check(non_empty_path());
  c->add_option("--dist", o.dist, "communication backend: auto, single, mpi or tcp")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "single", "mpi", "tcp"}));
  c->add_option("--dist-timeout", o.dist_timeout,
                "seconds a rank waits in a collective for a peer that sends nothing before it stops the run (the "
                "tcp backend; mpi waits without a limit): longer than rank 0's evaluations and checkpoint writes, "
                "which the other ranks wait out")
      ->capture_default_str()
      ->check(between(1.0, 1e7));
  return c;
}

int run_train(const TrainCommandOptions& o) {
  if (o.resume.empty() == o.config.empty())
    throw UsageError(o.resume.empty() ? "train: give a CONFIG.toml (or --resume RUN_DIR)"
                                      : "train: give either CONFIG.toml or --resume RUN_DIR, not both");
  if (!o.resume.empty() && !o.run_dir.empty()) throw UsageError("train: --resume names the run dir; drop --run-dir");
  trainer::TrainOptions t;
  t.config_path = o.config;
  t.overrides = o.overrides;
  t.run_dir = o.run_dir;
  t.resume_dir = o.resume;
  t.comm_backend = o.dist;
  t.dist_timeout_s = o.dist_timeout;
  try {
    return trainer::train(t);
  } catch (const trainer::UserError& e) {
    throw UsageError(e.what());
  }
}

}  // namespace azr::cli

namespace azr::cli {

CLI::App* add_bootstrap_command(CLI::App& app, BootstrapCommandOptions& o) {
  CLI::App* c = app.add_subcommand("bootstrap", "Make a model that knows the task formats, from generated programs");
  c->footer(
      "Generates tasks with the program generator (run in the sandbox), renders them as proposer and solver "
      "transcripts, trains model.preset (a new model) or model.path on them, and writes the model (Hugging Face "
      "format), heldout.jsonl and bootstrap.json (held-out solver accuracy and proposal validity before and after) "
      "into bootstrap.output. Self-play starts from it with model.path.\n"
      "Exit status: 0 done, 1 failed, 2 bad config or usage.");
  c->add_option("config", o.config, "the config (TOML) with a [bootstrap] section, e.g. configs/bootstrap.toml")
      ->check(non_empty_path())
      ->required();
  c->add_option("--set", o.overrides, "override a config key (repeatable)")->allow_extra_args(false);
  c->add_option("--output", o.output, "the model directory to write (default: bootstrap.output)")
      ->check(non_empty_path());
  return c;
}

int run_bootstrap(const BootstrapCommandOptions& o) {
  trainer::BootstrapOptions b;
  b.config_path = o.config;
  b.overrides = o.overrides;
  b.output = o.output;
  try {
    return trainer::bootstrap(b);
  } catch (const trainer::UserError& e) {
    throw UsageError(e.what());
  }
}

}  // namespace azr::cli
