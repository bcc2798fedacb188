// `azr bootstrap CONFIG`: a model that knows the task formats, from nothing.
//
//   1. the program generator writes tasks of every type (bootstrap/program_gen.h), run in the
//      sandbox for their outputs; a held-out set comes from another seed and never overlaps;
//   2. each training task becomes a proposer transcript (with K references from the others)
//      and a solver transcript, in exactly the task engine's formats (bootstrap/transcripts.h);
//   3. a new model (model.preset) or an existing one (model.path) learns them by next-token
//      prediction on the responses (bootstrap/warm_start.h);
//   4. before and after: greedy solver accuracy per type on the held-out tasks, and the share of
//      sampled proposals the sandbox accepts; all into bootstrap.json beside the saved model.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bootstrap/program_gen.h"
#include "bootstrap/transcripts.h"
#include "bootstrap/warm_start.h"
#include "buffer/task_jsonl.h"
#include "eval/task_eval.h"
#include "kernels/ops.h"
#include "model/generate.h"
#include "proposer/parse.h"
#include "proposer/prompts.h"
#include "proposer/validate.h"
#include "sandbox/pool.h"
#include "trainer/bootstrap_run.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"
#include "trainer/console_view.h"
#include "trainer/eval_setup.h"
#include "trainer/seeds.h"

namespace azr::trainer {

namespace fs = std::filesystem;
using buffer::Task;
using buffer::TaskType;
using nlohmann::ordered_json;

namespace {

constexpr TaskType kTypes[3] = {TaskType::Deduction, TaskType::Abduction, TaskType::Induction};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The share of sampled proposals (temperature 1) that parse and pass the sandbox, per type: what
// the seeding phase and the first self-play steps will see.
std::array<double, 3> proposal_validity(model::Transformer& m, const model::Tokenizer& tok, sandbox::Pool& pool,
                                        const std::vector<std::vector<Task>>& refs_by_type, const TrainConfig& cfg,
                                        int per_type, uint64_t seed) {
  std::array<double, 3> rate{};
  model::SamplingParams p = model::sampling_defaults(m, tok);
  p.max_new_tokens = cfg.algorithm.max_response_tokens;
  p.temperature = float(cfg.algorithm.temperature);  // as self-play will sample
  p.top_p = float(cfg.algorithm.top_p);
  p.top_k = int(cfg.algorithm.top_k);
  const model::PromptStyle style = prompt_style(cfg);
  std::mt19937_64 rng(seed);
  for (TaskType type : kTypes) {
    const std::vector<Task>& pool_refs = refs_by_type[size_t(type)];
    if (pool_refs.empty() || per_type <= 0) continue;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> programs;
    for (int i = 0; i < per_type; i++) {
      std::vector<Task> refs;
      for (int k = 0; k < (type == TaskType::Induction ? 1 : cfg.bootstrap.k_references); k++)
        refs.push_back(pool_refs[rng() % pool_refs.size()]);
      const std::string prompt = type == TaskType::Induction
                                     ? proposer::induction_proposer_prompt(refs[0].program, cfg.algorithm.induction_inputs, style)
                                     : proposer::code_proposer_prompt(type, refs, proposer::default_banned_words(),
                                                                      style, cfg.sandbox.cpu_seconds);
      programs.push_back(refs[0].program);
      prompts.push_back(tok.encode(prompt));
    }
    p.seed = seed + uint64_t(type);
    const std::vector<model::Completion> c = model::generate(m, prompts, p, &tok);
    proposer::ParseOptions po;
    po.num_inputs = cfg.algorithm.induction_inputs;
    std::vector<proposer::Proposal> parsed;
    for (size_t i = 0; i < c.size(); i++) {
      proposer::ParseResult r = proposer::parse_proposal(type, c[i].text, programs[i], po);
      if (r.check.ok) parsed.push_back(std::move(r.proposal));
    }
    proposer::ValidateSettings vs;
    vs.limits = sandbox_limits(cfg);
    vs.max_output_chars = size_t(cfg.sandbox.max_output_chars);
    vs.induction_inputs = size_t(cfg.algorithm.induction_inputs);
    int valid = 0;
    for (const proposer::ValidationResult& v : proposer::validate(pool, parsed, vs)) valid += v.check.ok ? 1 : 0;
    rate[size_t(type)] = double(valid) / double(per_type);
  }
  return rate;
}

ordered_json per_type(const std::array<double, 3>& v) {
  return {{"deduction", v[0]}, {"abduction", v[1]}, {"induction", v[2]}};
}

std::array<double, 3> accuracies(const eval::TaskEvalResult& r) { return {r.accuracy(0), r.accuracy(1), r.accuracy(2)}; }

// pass@1 per benchmark ({} without benchmarks).
ordered_json bench_scores(model::Transformer& m, const model::Tokenizer& tok, const std::vector<eval::Benchmark>& benches,
                          sandbox::Pool& pool, const TrainConfig& cfg) {
  ordered_json out = ordered_json::object();
  if (benches.empty()) return out;
  for (const eval::BenchScore& b :
       eval::evaluate_model(m, tok, benches, pool, sandbox_limits(cfg), model_eval_settings(cfg)).benches)
    out[b.name] = b.pass1;
  return out;
}

// The file that marks a finished bootstrap: one safetensors file, or the index of a sharded one
// (save_pretrained shards past 4 GiB).
const std::string kWeightMarkers[] = {"model.safetensors", "model.safetensors.index.json"};

// An output directory holding a file the bootstrap writes (config.json, tokenizer.json, ...) that
// no stopped bootstrap left there is refused: a user's config.json was written over. A stopped
// bootstrap's files are written over, as before: it made .model.tmp before any of them and wrote
// bootstrap.json before any config.json reached the directory. Other files (a README, .gitkeep)
// are left alone and do not matter.
void refuse_files_no_bootstrap_left(const fs::path& out) {
  std::error_code ec;
  bool stopped_bootstrap = false;
  std::string written_over;
  for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
    const std::string n = e.path().filename().string();
    if (n == "bootstrap.json" || n == ".model.tmp") stopped_bootstrap = true;
    const bool ours = n == "config.json" || n == "generation_config.json" || n == "tokenizer.json" ||
                      n == "heldout.jsonl" || (n.starts_with("model-") && n.ends_with(".safetensors"));
    if (ours && written_over.empty()) written_over = n;
  }
  if (!written_over.empty() && !stopped_bootstrap)
    throw UserError(out.string() + ": holds " + written_over + ", which the bootstrap would write over (no " +
                    "bootstrap.json or .model.tmp beside it: not what a stopped bootstrap left); move it or choose " +
                    "another bootstrap.output (or --output)");
}

}  // namespace

int bootstrap(const BootstrapOptions& opt) {
  TrainConfig cfg;
  try {
    cfg = load_config(opt.config_path, opt.overrides);
  } catch (const ConfigError& e) {
    throw UserError(e.what());
  }
  if (cfg.model.preset.empty() && cfg.model.path.empty()) throw UserError("bootstrap: set model.preset or model.path");
  const fs::path out = opt.output.empty() ? fs::path(cfg.bootstrap.output) : fs::path(opt.output);
  // A config with no [bootstrap] and no --set of one (a training config, given by mistake) runs on
  // the defaults, which decide where the model goes and how long it takes: said before anything.
  const bool bootstrap_set = std::any_of(opt.overrides.begin(), opt.overrides.end(), [](std::string_view o) {
    o.remove_prefix(std::min(o.size(), o.find_first_not_of(" \t")));
    return o.starts_with("bootstrap.");
  });
  // (A config read from a pipe cannot be read again: not judged.)
  if (!bootstrap_set && fs::is_regular_file(opt.config_path) &&
      config_key_origin(opt.config_path, {}, "bootstrap") == opt.config_path + ": ")
    std::fprintf(stderr,
                 "azr bootstrap: warning: %s has no [bootstrap] section; its keys take their defaults (%lld "
                 "tasks per type, %d warm-start steps; the model goes to %s)\n",
                 opt.config_path.c_str(), (long long)cfg.bootstrap.tasks_per_type, cfg.bootstrap.steps, out.c_str());
  for (const std::string& marker : kWeightMarkers)
    if (fs::exists(out / marker))
      throw UserError(out.string() + ": already holds a model; choose another bootstrap.output (or --output)");
  refuse_files_no_bootstrap_left(out);
  // Its files are written last: a path that cannot be a directory failed there, after every
  // minute of generation, evaluation and warm start.
  refuse_a_directory_that_cannot_be_made(out, "bootstrap output " + out.string() + " (--output, bootstrap.output): ");
  // The model and tokenizer first: a bad model.path fails before minutes of task generation.
  model::Transformer m = initial_model(cfg, model_backend(cfg));
  const MicroBatchChoice micro = resolve_micro_batch(cfg);  // 0 = the largest that fits
  std::unique_ptr<model::Tokenizer> tok = make_tokenizer(cfg);
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  kernels::set_cpu_threads(cfg.run.threads > 0 ? cfg.run.threads : cores);
  sandbox::PoolOptions po;
  po.workers = cfg.sandbox.workers > 0 ? cfg.sandbox.workers : cores;
  sandbox::Pool pool(po);
  const ConsoleView::Mode mode = ConsoleView::resolve(cfg.logging.console, fileno(stderr));
  auto say = [&](const std::string& s) {
    if (mode != ConsoleView::Mode::Off) std::fprintf(stderr, "%s\n", s.c_str());
  };
  const double t_start = now_s();
  // The benchmarks (CRUXEval-O/I by default) as azr train evaluates them, on eval.limit items;
  // loaded before the generation, so a bad eval.data_dir fails at once.
  std::string bench_off;
  const std::vector<eval::Benchmark> benches = load_eval_benchmarks(cfg, &bench_off);
  if (!bench_off.empty()) say("bootstrap: no benchmark evaluation (" + bench_off + ")");

  // ---- 1. tasks from the generator ------------------------------------------------------
  const int level = cfg.bootstrap.difficulty == "easy" ? 0 : cfg.bootstrap.difficulty == "medium" ? 1 : 2;
  bootstrap::GenSettings gs = bootstrap::preset(level);
  gs.max_output_chars = std::min(gs.max_output_chars, size_t(cfg.sandbox.max_output_chars));
  std::vector<std::vector<Task>> train(3), heldout(3);
  if (!cfg.bootstrap.heldout_from.empty()) {
    try {
      for (Task& t : eval::load_tasks_jsonl(cfg.bootstrap.heldout_from)) heldout[size_t(t.type)].push_back(std::move(t));
    } catch (const std::runtime_error& e) {
      throw UserError(std::string("bootstrap.heldout_from: ") + e.what());
    }
    if (heldout[0].empty() && heldout[1].empty() && heldout[2].empty())
      say("bootstrap: bootstrap.heldout_from " + cfg.bootstrap.heldout_from +
          " holds no tasks: the held-out accuracies are over none (0.000)");
  }
  ordered_json gen_report = ordered_json::object();
  for (TaskType type : kTypes) {
    const std::string tn = buffer::type_name(type);
    bootstrap::TaskGenReport tr, hr;
    // Offset 0 is the run seed's own set; a control run asks for other tasks of the same kind.
    const uint64_t data_seed = cfg.bootstrap.data_offset == 0
                                   ? derive_seed(cfg.run.seed, {uint64_t(SeedPhase::Bootstrap), uint64_t(type)})
                                   : derive_seed(cfg.run.seed, {uint64_t(SeedPhase::Bootstrap), uint64_t(type),
                                                                uint64_t(cfg.bootstrap.data_offset)});
    // Training shares no program with a given held-out set, nor a generated one with training.
    train[size_t(type)] = bootstrap::without_programs_of(
        bootstrap::generate_tasks(pool, type, int(cfg.bootstrap.tasks_per_type), data_seed, gs, &tr,
                                  cfg.algorithm.induction_inputs),
        heldout[size_t(type)]);
    // Held out (unless given): another seed, and no program that is also a training task's.
    if (cfg.bootstrap.heldout_from.empty())
      heldout[size_t(type)] = bootstrap::without_programs_of(
          bootstrap::generate_tasks(pool, type, int(cfg.bootstrap.heldout_per_type) * 2,
                                    derive_seed(cfg.run.seed, {uint64_t(SeedPhase::Heldout), uint64_t(type)}), gs, &hr,
                                    cfg.algorithm.induction_inputs),
          train[size_t(type)], cfg.bootstrap.heldout_per_type);
    gen_report[tn] = {{"train", train[size_t(type)].size()},
                      {"heldout", heldout[size_t(type)].size()},
                      {"attempted", tr.attempted + hr.attempted},
                      {"valid", tr.valid + hr.valid}};
    say(fmt::format("bootstrap: {} {} training and {} held-out tasks ({} of {} generated programs valid)", tn,
                    train[size_t(type)].size(), heldout[size_t(type)].size(), tr.valid + hr.valid,
                    tr.attempted + hr.attempted));
  }

  // ---- 2. transcripts ----------------------------------------------------------------------
  const model::PromptStyle style = prompt_style(cfg);
  std::vector<bootstrap::Transcript> data;
  std::mt19937_64 rng(derive_seed(cfg.run.seed, {uint64_t(SeedPhase::Bootstrap), 99}));
  for (TaskType type : kTypes) {
    const std::vector<Task>& ts = train[size_t(type)];
    for (size_t i = 0; i < ts.size(); i++) {
      std::vector<Task> refs;
      if (type != TaskType::Induction)
        for (int k = 0; k < cfg.bootstrap.k_references && ts.size() > 1; k++) {
          size_t j = size_t(rng() % (ts.size() - 1));
          refs.push_back(ts[j >= i ? j + 1 : j]);  // any other task
        }
      data.push_back(bootstrap::proposer_transcript(ts[i], refs, style));
      data.push_back(bootstrap::solver_transcript(ts[i], style));
    }
  }

  // ---- 3. the model, before ------------------------------------------------------------------
  std::vector<Task> heldout_all;
  for (const auto& h : heldout) heldout_all.insert(heldout_all.end(), h.begin(), h.end());
  const eval::TaskEvalSettings es = task_eval_settings(cfg);
  const int validity_samples = 16;
  say("bootstrap: evaluating the new model on the held-out tasks");
  const eval::TaskEvalResult before = eval::evaluate_solver(m, *tok, heldout_all, pool, es);
  const ordered_json bench_before = bench_scores(m, *tok, benches, pool, cfg);
  const std::array<double, 3> valid_before =
      proposal_validity(m, *tok, pool, heldout, cfg, validity_samples, derive_seed(cfg.run.seed, {77}));

  // ---- 4. warm start -------------------------------------------------------------------------
  bootstrap::WarmStartSettings ws;
  ws.steps = cfg.bootstrap.steps;
  ws.batch_size = cfg.bootstrap.batch_size;
  ws.micro_batch_size = micro.size;
  // A given size's memory warning plans self-play's sequences and generation, not this warm start's
  // short transcripts: said only for the size chosen here.
  if (!micro.note.empty() && cfg.algorithm.micro_batch_size == 0) say(micro.note);
  ws.lr = cfg.bootstrap.lr;
  ws.seed = derive_seed(cfg.run.seed, {uint64_t(SeedPhase::Bootstrap), 7});
  const int32_t eos = int32_t(m.config().eos_token_ids.empty() ? 0 : m.config().eos_token_ids[0]);
  ConsoleView console(1, ws.steps, mode);
  console.phase("warm start");
  const double t_train = now_s();
  const bootstrap::WarmStartStats stats =
      bootstrap::warm_start(m, *tok, data, eos, ws, [&](int step, double loss) {
        console.step_done(step + 1, {{"loss", loss}}, {{"loss", "loss"}});
      });
  const double train_s = now_s() - t_train;
  console.finish("");

  // ---- 5. after, and the files ----------------------------------------------------------------
  say("bootstrap: evaluating the warm-started model");
  const eval::TaskEvalResult after = eval::evaluate_solver(m, *tok, heldout_all, pool, es);
  const ordered_json bench_after = bench_scores(m, *tok, benches, pool, cfg);
  const std::array<double, 3> valid_after =
      proposal_validity(m, *tok, pool, heldout, cfg, validity_samples, derive_seed(cfg.run.seed, {77}));
  // The weights go in last: their file (or a sharded model's index) marks a finished bootstrap
  // (a rerun refuses a directory holding it), so a kill or a full disk before then leaves a
  // directory the rerun writes over, never one that is refused and yet unusable. Every file is
  // checked and synced before any is moved into place.
  fs::create_directories(out);
  const fs::path staging = out / ".model.tmp";
  fs::remove_all(staging);
  try {
    m.save_pretrained(staging);
  } catch (const model::NotFiniteWeights& e) {
    throw std::runtime_error(std::string("bootstrap: the warm-started model is not saved: ") + e.what());
  }
  write_synced(out / "tokenizer.json", tokenizer_json(cfg, *tok));
  std::string heldout_lines;
  for (const Task& t : heldout_all) heldout_lines += buffer::task_to_json(t, /*core_only=*/true).dump() + "\n";
  write_synced(out / "heldout.jsonl", heldout_lines);
  ordered_json rep;
  rep["config"] = opt.config_path;
  rep["seed"] = cfg.run.seed;
  rep["difficulty"] = cfg.bootstrap.difficulty;
  rep["prompt_style"] = cfg.algorithm.prompt_style;  // the trainer must use the same wording
  rep["tasks"] = gen_report;
  rep["transcripts"] = data.size();
  rep["warm_start"] = {{"steps", ws.steps},
                       {"batch_size", ws.batch_size},
                       {"lr", ws.lr},
                       {"seconds", train_s},
                       {"tokens_per_s", stats.tokens_per_s},
                       {"trained_tokens", stats.trained_tokens},
                       {"loss_first", stats.loss.empty() ? 0.0 : stats.loss.front()},
                       {"loss_last", stats.loss.empty() ? 0.0 : stats.loss.back()},
                       {"loss", stats.loss}};
  rep["heldout_accuracy"] = {{"before", per_type(accuracies(before))}, {"after", per_type(accuracies(after))}};
  rep["benchmarks"] = {{"before", bench_before}, {"after", bench_after}, {"limit", cfg.eval.limit}};
  rep["proposal_validity"] = {{"before", per_type(valid_before)}, {"after", per_type(valid_after)},
                              {"samples_per_type", validity_samples}};
  rep["seconds"] = now_s() - t_start;
  write_synced(out / "bootstrap.json", rep.dump(2) + "\n");
  sync_path(out / "tokenizer.json");
  for (const fs::directory_entry& e : fs::directory_iterator(staging)) sync_path(e.path());
  auto is_marker = [](const fs::path& f) {
    return std::find(std::begin(kWeightMarkers), std::end(kWeightMarkers), f.filename().string()) !=
           std::end(kWeightMarkers);
  };
  for (const fs::directory_entry& e : fs::directory_iterator(staging))
    if (!is_marker(e.path())) fs::rename(e.path(), out / e.path().filename());
  sync_path(out);  // config.json and any shards are in place before the marker
  for (const std::string& marker : kWeightMarkers)
    if (fs::exists(staging / marker)) fs::rename(staging / marker, out / marker);
  fs::remove(staging);
  sync_path(out);
  std::string table = fmt::format("azr bootstrap: {} transcripts, {} steps in {}\n", data.size(), ws.steps,
                                  format_duration(train_s));
  // One label width for the header and every row: the longest label is "valid proposals before".
  table += fmt::format("  {:<22}{:>9}  {:>9}  {:>9}\n", "", "deduction", "abduction", "induction");
  auto row = [&](const char* label, const std::array<double, 3>& v) {
    table += fmt::format("  {:<22}{:>9.3f}  {:>9.3f}  {:>9.3f}\n", label, v[0], v[1], v[2]);
  };
  row("held-out acc before", accuracies(before));
  row("held-out acc after", accuracies(after));
  row("valid proposals before", valid_before);
  row("valid proposals after", valid_after);
  for (const auto& [name, score] : bench_after.items())
    table += fmt::format("  {:<22}{:>9.3f} -> {:.3f} pass@1\n", name, bench_before[name].get<double>(),
                         score.get<double>());
  table += "  model       " + out.string() + "\n  report      " + (out / "bootstrap.json").string() + "\n";
  if (mode != ConsoleView::Mode::Off) std::fputs(table.c_str(), stderr);
  return 0;
}

}  // namespace azr::trainer
