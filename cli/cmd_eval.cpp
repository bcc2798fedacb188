// azr eval: benchmark evaluation (pass@1 / pass@k), from answers produced elsewhere
// (--answers) or by generating them with a model (--model). See eval/report.h for the scores.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/input.h"
#include "cli/output_file.h"
#include "eval/benchmarks.h"
#include "eval/model_eval.h"
#include "eval/code_bench.h"
#include "eval/prompts.h"
#include "eval/report.h"
#include "kernels/ops.h"
#include "model/chat_format.h"
#include "model/generate.h"
#include "model/json_text.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "sandbox/pool.h"
#include "trainer/console_view.h"

namespace azr::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct Line {
  std::string bench, id, response;
  size_t lineno = 0;
};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Every line is checked (JSON, fields, known benchmark) before anything is loaded or graded.
std::vector<Line> read_answers(const std::string& path, std::string& name_out) {
  InputFile input(path);
  const std::string& name = input.name();
  name_out = name;
  std::vector<Line> lines;
  JsonLines input_lines(input.stream(), name);
  for (json j; input_lines.next(j);) {
    const std::string at = input_lines.where();
    if (!j.is_object()) throw UsageError(at + "expected a JSON object");
    Line l;
    l.lineno = input_lines.lineno();
    if (!j.contains("bench")) throw UsageError(at + "field 'bench' is missing");
    if (!j["bench"].is_string()) throw UsageError(at + "field 'bench' must be a string");
    l.bench = j["bench"].get<std::string>();
    if (!eval::find_benchmark(l.bench))
      throw UsageError(at + "unknown benchmark '" + l.bench + "' (known: " + eval::benchmark_names() + ")");
    if (!j.contains("id")) throw UsageError(at + "field 'id' is missing");
    if (j["id"].is_string())
      l.id = j["id"].get<std::string>();
    else if (j["id"].is_number_integer())
      l.id = j["id"].dump();
    else
      throw UsageError(at + "field 'id' must be a string (or an integer)");
    if (!j.contains("response")) throw UsageError(at + "field 'response' is missing");
    if (!j["response"].is_string()) throw UsageError(at + "field 'response' must be a string");
    l.response = j["response"].get<std::string>();
    lines.push_back(std::move(l));
  }
  return lines;
}

eval::Benchmark load_bench(const std::string& name, const fs::path& data) {
  try {
    return eval::load_benchmark(name, data);
  } catch (const eval::BenchmarkError& e) {
    throw UsageError(e.what());
  }
}

struct Job {
  eval::Benchmark bench;
  std::vector<eval::Sample> samples;
};

int grade_and_report(const EvalOptions& o, std::vector<Job>& jobs) {
  sandbox::PoolOptions popts;
  popts.workers = o.workers;
  popts.alternate_workers = 0;
  popts.preimports = eval::code_bench_preimports();
  sandbox::Pool pool(popts);
  sandbox::Limits limits;
  limits.cpu_seconds = o.timeout;
  limits.memory_bytes = uint64_t(o.memory_mib * 1024 * 1024);

  // The results replace --out only once all are written: an interrupted or failed grading leaves
  // the old file whole.
  std::optional<ReplacedFile> out;
  if (!o.out.empty()) out.emplace(o.out);
  std::vector<eval::BenchScore> scores;
  bool internal = false;
  for (Job& job : jobs) {
    spdlog::info("eval: grading {} ({} responses)", job.bench.info.name, job.samples.size());
    std::vector<eval::Verdict> v = eval::grade_samples(pool, job.bench, job.samples, limits);
    std::map<size_t, int> sample_no;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].reason == "internal_error") internal = true;
      if (out) {
        const auto& s = job.samples[i];
        json j{{"bench", job.bench.info.name}, {"id", job.bench.items[s.item].id}, {"sample", sample_no[s.item]++},
               {"response", s.response}, {"extracted", v[i].extracted}, {"correct", v[i].correct},
               {"reason", v[i].reason}};
        if (!v[i].detail.empty()) j["detail"] = v[i].detail;
        out->stream() << dump(j) << '\n';
      }
    }
    scores.push_back(eval::score_bench(job.bench, job.samples, v, o.k));
  }
  if (out) out->commit();
  for (const auto& s : scores) {
    if (o.k > 0 && !s.passk && s.items > 0)
      spdlog::warn("eval: {}: pass@{} not reported (an item has only {} samples)", s.name, o.k, s.min_n);
    // EvalPlus refuses to score samples with problems missing; the score here is over the
    // answered items, which the table shows as answered/total, and said once.
    if (s.items > 0 && s.items < s.benchmark_items)
      spdlog::warn("eval: {}: answers for {} of its {} items; its pass@1 is over those {} alone", s.name, s.items,
                   s.benchmark_items, s.items);
  }
  // pass@1 is always reported: --k 1 would add it again, a second column of the same numbers.
  eval::Summary summary = eval::summarize(std::move(scores), o.k == 1 ? 0 : o.k);
  if (o.json)
    std::cout << dump(eval::summary_json(summary)) << '\n';
  else
    std::cout << eval::format_table(summary);
  std::cout.flush();
  if (internal) {
    std::cerr << "azr: the sandbox failed on some responses (reason internal_error)\n";
    return 1;
  }
  return 0;
}

int run_answers(const EvalOptions& o, const fs::path& data) {
  std::string name;
  std::vector<Line> lines = read_answers(o.answers, name);
  if (lines.empty()) throw UsageError(name + ": no answers (one JSON object a line: bench, id, response)");
  // Load each benchmark named, in registry order, then check every id before grading.
  std::map<std::string, size_t> job_of;
  std::vector<Job> jobs;
  for (const auto& info : eval::benchmark_registry())
    if (std::any_of(lines.begin(), lines.end(), [&](const Line& l) { return l.bench == info.name; })) {
      job_of[info.name] = jobs.size();
      jobs.push_back({load_bench(info.name, data), {}});
    }
  std::vector<std::unordered_map<std::string, size_t>> index(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j)
    for (size_t i = 0; i < jobs[j].bench.items.size(); ++i) index[j][jobs[j].bench.items[i].id] = i;
  for (const Line& l : lines) {
    size_t j = job_of.at(l.bench);
    auto it = index[j].find(l.id);
    if (it == index[j].end()) {  // with the benchmark's first id, for the form (sample_0, HumanEval/0, Mbpp/11)
      const auto& items = jobs[j].bench.items;
      throw UsageError(name + ":" + std::to_string(l.lineno) + ": " + l.bench + " has no item with id '" + l.id +
                       "'" + (items.empty() ? "" : " (its first is '" + items[0].id + "')"));
    }
    jobs[j].samples.push_back({it->second, l.response});
  }
  return grade_and_report(o, jobs);
}

// The template a model is scored with. A model `azr bootstrap` made or a checkpoint `azr train`
// wrote records the prompt wording it learned (model::learned_prompt_style): scored on another
// template it looks worse than it is (a quickstart checkpoint: CRUXEval-I 0.0 under r1, 12.5
// under compact). Without --template that wording is the default; a --template that differs is
// warned of. A model that records nothing gets r1.
std::string template_for(const std::string& model_dir, const std::string& asked) {
  const auto learned = model::learned_prompt_style(model_dir);
  const std::string matching = learned && learned->style == model::PromptStyle::Compact ? "compact" : "r1";
  if (asked.empty()) {
    if (learned)
      spdlog::info("eval: --template {}, the wording {} says the model learned", matching, learned->record.string());
    return matching;
  }
  if (learned && asked != matching)
    spdlog::warn("eval: {} says the model learned the {} prompts; --template {} is another wording (--template {} "
                 "matches it)",
                 learned->record.string(), model::prompt_style_name(learned->style), asked, matching);
  return asked;
}

// Generation's progress, on stderr (DESIGN: long work shows it): on a terminal one line rewritten
// after each batch; otherwise a line at each tenth of the responses, so that a log gets ten lines
// for a benchmark that generates for hours, not one a batch.
class GenerationProgress {
 public:
  GenerationProgress(std::string bench, bool terminal)
      : bench_(std::move(bench)), terminal_(terminal), start_(std::chrono::steady_clock::now()) {}
  void operator()(size_t done, size_t total, int64_t tokens) {
    if (total == 0) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const std::string line = fmt::format(
        "eval: {}: {}/{} responses, {:.0f} tokens/s, elapsed {}, ETA {}", bench_, done, total,
        seconds > 0 ? double(tokens) / seconds : 0.0, trainer::format_duration(seconds),
        trainer::format_duration(done > 0 ? seconds / double(done) * double(total - done) : -1));
    if (terminal_) {
      std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), done == total ? "\n" : "");
    } else if (const size_t tenth = done * 10 / total; tenth > said_tenth_) {
      said_tenth_ = tenth;
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }

 private:
  std::string bench_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_;
  size_t said_tenth_ = 0;
};

int run_model(const EvalOptions& o, const fs::path& data) {
  if (o.bench.empty()) throw UsageError("eval: --model needs --bench NAME[,NAME...]");
  eval::Template tmpl;
  const std::string template_name = template_for(o.model, o.template_name);
  try {
    tmpl = eval::parse_template(template_name);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--template: ") + e.what());
  }
  std::vector<std::string> names;
  for (const auto& b : o.bench) {
    if (!eval::find_benchmark(b))
      throw UsageError("--bench: unknown benchmark '" + b + "' (known: " + eval::benchmark_names() + ")");
    if (std::find(names.begin(), names.end(), b) == names.end()) names.push_back(b);
  }
  // pass@k needs k samples of each item: said before generating, not after.
  if (o.k > o.n) throw UsageError("--k " + std::to_string(o.k) + ": pass@k needs --n " + std::to_string(o.k) +
                                  " or more samples per item (--n is " + std::to_string(o.n) + ")");
  std::vector<Job> jobs;
  for (const auto& n : names) jobs.push_back({load_bench(n, data), {}});

  kernels::set_cpu_threads(o.threads);
  model::Transformer m = load_model(o.model, o.device);
  auto tok = load_model_tokenizer(o.model, o.tokenizer);

  eval::ModelEvalSettings s;
  s.tmpl = tmpl;
  s.n = o.n;
  s.temperature = o.temperature;
  s.top_p = o.top_p;
  s.max_tokens = o.max_tokens;
  s.seed = o.seed;
  s.batch_size = o.batch_size;
  s.limit = o.limit > 0 ? size_t(o.limit) : 0;
  for (Job& job : jobs) {
    spdlog::info("eval: generating {} ({} samples per item)", job.bench.info.name, o.n);
    GenerationProgress progress(job.bench.info.name, isatty(STDERR_FILENO) == 1);
    s.progress = [&](size_t done, size_t total, int64_t tokens) { progress(done, total, tokens); };
    try {
      job.samples = eval::generate_samples(m, *tok, job.bench, s);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("eval: ") + e.what());
    }
    // A response cut off before its answer is graded wrong like any other: said, since the
    // default is far below the paper's budgets (8,096 tokens for code, 16,000 for math).
    const auto cut =
        std::count_if(job.samples.begin(), job.samples.end(), [](const eval::Sample& x) { return x.cut_off; });
    if (cut > 0)
      spdlog::warn("eval: {}: {} of {} responses stopped at --max-tokens {} before their end (the paper evaluates "
                   "with 8096 tokens for code, 16000 for math)",
                   job.bench.info.name, cut, job.samples.size(), o.max_tokens);
  }
  return grade_and_report(o, jobs);
}

}  // namespace

CLI::App* add_eval_command(CLI::App& app, EvalOptions& o) {
  CLI::App* c = app.add_subcommand("eval", "Evaluate on benchmarks (CRUXEval, HumanEval(+), MBPP(+), math)");
  c->footer(
      "Benchmarks: humanevalplus mbppplus humaneval mbpp (code), aime24 aime25 amc23 math500 minerva_math "
      "olympiadbench (math), gsm8k (math-graded, not in the math avg), cruxeval_o cruxeval_i (in-distribution, "
      "reported apart). code avg = mean pass@1 of humanevalplus and mbppplus (humaneval and mbpp are reported "
      "beside it; the paper's also has LiveCodeBench, which azr lacks), math avg = of the six math benchmarks, "
      "over those evaluated (the table names them); overall = (code avg + math avg) / 2.\n"
      "--answers FILE: one {\"bench\", \"id\", \"response\"} object per line (several lines per item = several "
      "samples); graded without a model. --model DIR --bench NAME[,NAME]: generate first (greedy by default; "
      "sampled when --n > 1), then grade. Benchmark data: --data DIR, else $AZR_BENCHMARKS, else "
      "../shared/benchmarks. --out FILE writes one JSON line per response: bench, id, sample, response, "
      "extracted, correct, reason[, detail].\n"
      "Exit status: 0 graded; 1 the sandbox failed; 2 bad usage or input (FILE:LINE: ...).");
  CLI::Option* answers = c->add_option("--answers", o.answers, "JSONL of {bench, id, response} to grade (- for stdin)")
      ->check(non_empty_path());
  c->add_option("--model", o.model, "model directory to generate answers with")->check(non_empty_path());
  c->add_option("--tokenizer", o.tokenizer, "tokenizer.json or its directory (default: MODEL/tokenizer.json)")
      ->check(non_empty_path());
  c->add_option("--bench", o.bench, "benchmarks to generate for (--model)")->delimiter(',');
  c->add_option("--data", o.data, "benchmark data dir (default: $AZR_BENCHMARKS, else ../shared/benchmarks)")
      ->check(non_empty_path());
  c->add_option("--out", o.out, "per-response results JSONL")->check(non_empty_path());
  c->add_option("--k", o.k, "also report pass@k (unbiased estimator; needs n >= k samples per item)")
      ->check(between(0, kMaxSamples));
  c->add_option("--n", o.n, "samples per item (--model)")->capture_default_str()->check(between(1, kMaxSamples));
  c->add_option("--limit", o.limit, "only the first L items of each benchmark (--model); 0 = all")
      ->capture_default_str()->check(non_negative());
  add_sampling_options(c, o.temperature, "sampling temperature (default 0 = greedy when --n 1, else 1.0)", o.top_p);
  c->add_option("--max-tokens", o.max_tokens, "most new tokens per sample")->capture_default_str()
      ->check(between(1, kMaxNewTokens));
  c->add_option("--template", o.template_name,
                "r1 (self-play models), boxed (base models) or compact (models trained on compact prompts, e.g. "
                "azr bootstrap's); default: the wording the model's bootstrap.json or trainer_state.json records, "
                "else r1")
      ->check(CLI::IsMember({"r1", "boxed", "compact"}));
  c->add_option("--seed", o.seed, "sampling seed")->capture_default_str()->check(seed());
  c->add_option("--batch-size", o.batch_size, "sequences generated at once")->capture_default_str()
      ->check(between(1, kMaxSamples));
  c->add_flag("--json", o.json, "print the summary as one JSON object (percentages) instead of the table");
  c->add_option("--timeout", o.timeout, "CPU seconds per sandbox job")->capture_default_str()
      ->check(between(sandbox::kMinCpuSeconds, sandbox::kMaxCpuSeconds));
  c->add_option("--memory", o.memory_mib, "address-space limit per sandbox job, MiB")->capture_default_str()
      ->check(between(sandbox::kMinMemoryMib, sandbox::kMaxMemoryMib));
  c->add_option("--workers", o.workers, "sandbox workers (default: one per CPU)")->check(between(0, 1024));
  c->add_option("--threads", o.threads, "CPU threads for generation; 0 = all cores")->capture_default_str()
      ->check(between(0, kMaxThreads));
  add_device_option(c, o.device);
  // The flags of generation mean nothing to answers made elsewhere: refused with them, where they
  // were ignored (--n 8 --answers F graded F's one sample an item, and said nothing).
  // get_option throws on a name not defined: a flag renamed must be renamed here too.
  for (const char* model_only : {"--model", "--tokenizer", "--bench", "--n", "--limit", "--temperature", "--top-p",
                                 "--max-tokens", "--template", "--seed", "--batch-size", "--threads", "--device",
                                 "--matmul-precision", "--decode-graphs", "--no-decode-graphs"})
    answers->excludes(c->get_option(model_only));
  return c;
}

namespace {

// --out is written only when grading starts, after --model has generated every answer: a
// directory or an unwritable place failed there, and --out naming the --answers file emptied the
// answers before they were read. Both are refused up front. The results go to a new file beside
// the one they replace (ReplacedFile), so that file's directory must take one too.
void check_out_target(const EvalOptions& o) {
  if (o.out.empty()) return;
  if (o.out == "-")
    throw UsageError("--out -: the per-response results go to a file; stdout has the table (or --json's summary)");
  std::error_code ec;
  if (fs::is_directory(o.out, ec)) throw UsageError("--out " + o.out + ": is a directory; give a file name");
  if (!o.answers.empty() && o.answers != "-" && fs::equivalent(o.answers, o.out, ec))
    throw UsageError("--out " + o.out + ": is the --answers file; write the results to another file");
  // An existing file (/dev/null too) must be writable; a replaced one, or a new one, needs a
  // writable directory.
  const std::string replaced = ReplacedFile::replaced_path(o.out);
  if (fs::exists(o.out, ec)) {
    if (::access(o.out.c_str(), W_OK) != 0)
      throw UsageError("--out " + o.out + ": not writable (" + std::strerror(errno) + ")");
    if (replaced.empty()) return;
  }
  const fs::path parent = fs::absolute(replaced).parent_path();
  if (!fs::is_directory(parent, ec))
    throw UsageError("--out " + o.out + ": cannot write in " + parent.string() +
                     (fs::exists(parent, ec) ? " (not a directory)" : " (no such directory)"));
  if (::access(parent.c_str(), W_OK) != 0)
    throw UsageError("--out " + o.out + ": cannot write in " + parent.string() + " (" + std::strerror(errno) + ")");
}

}  // namespace

int run_eval(const EvalOptions& o) {
  if (o.answers.empty() == o.model.empty()) throw UsageError("eval: give either --answers FILE or --model DIR");
  check_out_target(o);
  fs::path data;
  try {
    data = eval::resolve_data_dir(o.data);
  } catch (const eval::BenchmarkError& e) {
    throw UsageError(e.what());
  }
  return o.answers.empty() ? run_model(o, data) : run_answers(o, data);
}

}  // namespace azr::cli
