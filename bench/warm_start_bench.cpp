// The warm start's throughput with the task engine's two prompt wordings: the same generated
// tasks (models/quickstart/heldout.jsonl by default) as paper and as compact transcripts, each
// trained for the same steps on a new azr-tiny model. What matters to `azr bootstrap` is
// transcripts per second: the loss only counts response tokens, which are the same in both, so a
// shorter prompt is pure savings. The paper wording is the baseline, in the same process.
// Both figures of a wording come from one timer (the whole warm_start() call: encoding, the
// optimizer's state, the steps), after an untimed warm-up, and the wordings run in the order
// paper, compact, compact, paper (each figure the mean of its two runs), so neither gains from
// going second.
//
//   build/bin/warm_start_bench [--steps 20] [--batch 16] [--tasks FILE] [--threads 0]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench_util.h"
#include "bootstrap/transcripts.h"
#include "bootstrap/warm_start.h"
#include "eval/task_eval.h"
#include "kernels/ops.h"
#include "model/byte_tokenizer.h"
#include "model/presets.h"

using namespace azr;

namespace {

struct Figures {
  double seconds = 0, transcripts_per_s = 0, tokens_per_s = 0, mean_tokens = 0;
};

// K = 2 references per deduction/abduction proposer transcript (the quickstart's), drawn as
// azr bootstrap does: any other task of the same type.
std::vector<bootstrap::Transcript> transcripts(const std::vector<buffer::Task>& tasks, model::PromptStyle style) {
  std::vector<bootstrap::Transcript> out;
  for (size_t i = 0; i < tasks.size(); i++) {
    std::vector<buffer::Task> refs;
    if (tasks[i].type != buffer::TaskType::Induction)
      for (size_t j = i + 1; j < i + tasks.size() && refs.size() < 2; j++)
        if (tasks[j % tasks.size()].type == tasks[i].type) refs.push_back(tasks[j % tasks.size()]);
    out.push_back(bootstrap::proposer_transcript(tasks[i], refs, style));
    out.push_back(bootstrap::solver_transcript(tasks[i], style));
  }
  return out;
}

Figures run(const std::vector<bootstrap::Transcript>& data, int steps, int batch) {
  model::Transformer m = model::Transformer::random(model::preset_config("azr-tiny"), 1, 0.02f);
  model::ByteTokenizer tok;
  bootstrap::WarmStartSettings s;
  s.steps = steps;
  s.batch_size = batch;
  s.micro_batch_size = 8;
  s.seed = 1;
  const int32_t eos = int32_t(m.config().eos_token_ids.at(0));
  int64_t tokens = 0;
  for (const bootstrap::Transcript& t : data) tokens += int64_t(bootstrap::encode_transcript(tok, t, eos).ids.size());
  const auto t0 = bench::Clock::now();
  const bootstrap::WarmStartStats st = bootstrap::warm_start(m, tok, data, eos, s);
  Figures f;
  f.seconds = bench::secs_since(t0);
  f.transcripts_per_s = double(steps) * batch / f.seconds;
  f.tokens_per_s = double(st.processed_tokens) / f.seconds;
  f.mean_tokens = double(tokens) / double(data.size());
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Warm-start throughput: paper against compact transcripts of the same tasks"};
  int steps = 20, batch = 16, threads = 0;
  std::string tasks_path = std::string(AZR_SOURCE_DIR) + "/models/quickstart/heldout.jsonl";
  app.add_option("--steps", steps, "optimizer steps per wording")->capture_default_str();
  app.add_option("--batch", batch, "transcripts per step")->capture_default_str();
  app.add_option("--tasks", tasks_path, "generated tasks (JSONL)")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads; 0 = all cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  kernels::set_cpu_threads(threads > 0 ? threads : cores);

  const std::vector<buffer::Task> tasks = eval::load_tasks_jsonl(tasks_path);
  std::printf("warm start, azr-tiny, %zu tasks -> %zu transcripts, %d steps of %d, %d threads; each wording run "
              "twice (paper, compact, compact, paper), the mean\n", tasks.size(),
              2 * tasks.size(), steps, batch, threads > 0 ? threads : cores);
  const std::vector<bootstrap::Transcript> paper_data = transcripts(tasks, model::PromptStyle::Paper);
  const std::vector<bootstrap::Transcript> compact_data = transcripts(tasks, model::PromptStyle::Compact);
  (void)run(compact_data, std::min(steps, 2), batch);  // warm-up: threads, allocator, caches
  auto mean = [](const Figures& a, const Figures& b) {
    return Figures{(a.seconds + b.seconds) / 2, (a.transcripts_per_s + b.transcripts_per_s) / 2,
                   (a.tokens_per_s + b.tokens_per_s) / 2, a.mean_tokens};
  };
  const Figures paper_first = run(paper_data, steps, batch);
  const Figures compact_first = run(compact_data, steps, batch);
  const Figures compact_second = run(compact_data, steps, batch);
  const Figures paper_second = run(paper_data, steps, batch);
  const Figures paper = mean(paper_first, paper_second), compact = mean(compact_first, compact_second);
  for (const auto& [name, f] : {std::pair{"paper", paper}, std::pair{"compact", compact}})
    std::printf("  %-8s %6.0f tokens/transcript  %7.1f transcripts/s  %7.0f tokens/s  (%.1f s)\n", name, f.mean_tokens,
                f.transcripts_per_s, f.tokens_per_s, f.seconds);
  const double speedup = compact.transcripts_per_s / paper.transcripts_per_s;
  std::printf("  compact / paper: %.2fx transcripts per second\n", speedup);
  nlohmann::json j = {{"bench", "warm_start"},
                      {"steps", steps},
                      {"batch", batch},
                      {"paper_transcripts_per_s", paper.transcripts_per_s},
                      {"compact_transcripts_per_s", compact.transcripts_per_s},
                      {"paper_tokens_per_transcript", paper.mean_tokens},
                      {"compact_tokens_per_transcript", compact.mean_tokens},
                      {"paper_tokens_per_s", paper.tokens_per_s},
                      {"compact_tokens_per_s", compact.tokens_per_s},
                      {"speedup", speedup}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
