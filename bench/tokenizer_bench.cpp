// Encode and decode throughput of azr's BpeTokenizer against Hugging Face's Rust `tokenizers` (npm
// tokenizers@0.23.2, N-API addon, run with node) on the same corpora in the same run, plus a
// large differential (generated strings and the benchmark text) that counts mismatches.
//   corpora (tests/tokdiff/gen_corpus.py bench): crux_programs (every CruxEval program as its own
//   string), crux_concat (all of them as one string), bench_text (every string field of every
//   benchmark file, >= 6 MB), combining_marks (three long runs of marks that NFC reorders).
//   azr:  BpeTokenizer::encode per string, one thread; warm-up pass, then passes until
//         --min-seconds have passed.
//   rust: tests/tokdiff/bench.mjs times only the encode calls inside node (start-up, file
//         reading and JSON are excluded): `single` = await encode() per string; `batch` =
//         encodeBatch(all strings) with RAYON_NUM_THREADS=1 (one thread, like azr) and with
//         rayon's default pool (all CPUs).
//   decode: the same on the ids of each string (BpeTokenizer::decode per string; Rust decode()
//         per string and decodeBatch). Sampled tokens become text through decode every step.
//         azr's decode(encode(s)) is compared with s: only NFC normalisation may change a string
//         (the combining_marks corpus); the count is reported, not failed on.
// Prints a table and one JSON line. Never asserts on time. Without node or
// tests/tokdiff/node_modules/tokenizers (scripts/setup.sh installs it) it prints that, reports
// azr alone, and exits 0. Exits 1 only on a mismatch or a broken setup.
//
//   tokenizer_bench [--shared DIR] [--tests-dir DIR] [--python EXE] [--diff-n N] [--min-seconds S]
// Defaults: $AZR_SHARED_DIR, $AZR_TESTS_DIR, $AZR_PYTHON, else the compile-time defaults.
#include <CLI/CLI.hpp>
#include <stdlib.h>  // mkdtemp
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "model/tokenizer.h"
#include "tests/tokdiff/tokdiff_support.h"

#ifndef AZR_DEFAULT_SHARED_DIR
#define AZR_DEFAULT_SHARED_DIR "../shared"
#endif
#ifndef AZR_DEFAULT_TESTS_DIR
#define AZR_DEFAULT_TESTS_DIR "tests"
#endif
#ifndef AZR_DEFAULT_PYTHON
#define AZR_DEFAULT_PYTHON "/usr/bin/python3.11"
#endif

namespace {

using azr::tokdiff::read_lines;
using azr::tokdiff::sh_quote;
using azr::tokdiff::TempDir;

namespace fs = std::filesystem;
using json = nlohmann::json;
using azr::bench::Clock;
using azr::bench::env_or;
using azr::bench::secs_since;


int run(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}


std::vector<std::string> read_texts(const fs::path& p) {
  std::vector<std::string> texts;
  for (const auto& l : read_lines(p)) texts.push_back(json::parse(l).at("text").get<std::string>());
  return texts;
}


struct AzrTiming {
  size_t strings = 0, bytes = 0, tokens = 0;
  int passes = 0;
  double seconds_per_pass = 0;
};

// Runs `pass` (one pass over a corpus, returning a count) until min_s have gone, after the
// caller's warm-up; sets `passes` and `seconds_per_pass`. False when a pass counted other than
// `expected` (the work changed between passes).
template <typename Timing, typename Pass>
bool time_passes(Timing& r, double min_s, size_t expected, Pass pass) {
  size_t sink = 0;
  const auto t0 = Clock::now();
  double sec = 0;
  do {
    sink += pass();
    ++r.passes;
    sec = secs_since(t0);
  } while (sec < min_s);
  r.seconds_per_pass = sec / r.passes;
  return sink == expected * static_cast<size_t>(r.passes);
}

struct AzrDecodeTiming {
  int passes = 0;
  double seconds_per_pass = 0;
  size_t roundtrip_changed = 0;  // strings whose decode(encode(s)) != s
};

AzrDecodeTiming time_azr_decode(const azr::model::BpeTokenizer& tok, const std::vector<std::string>& texts,
                                double min_s) {
  AzrDecodeTiming r;
  std::vector<std::vector<int32_t>> ids;
  for (const auto& s : texts) ids.push_back(tok.encode(s));
  size_t bytes = 0;
  for (size_t i = 0; i < texts.size(); ++i) {  // warm-up pass
    const std::string back = tok.decode(ids[i]);
    bytes += back.size();
    if (back != texts[i]) ++r.roundtrip_changed;
  }
  const bool stable = time_passes(r, min_s, bytes, [&] {
    size_t n = 0;
    for (const auto& x : ids) n += tok.decode(x).size();
    return n;
  });
  if (!stable) std::fprintf(stderr, "tokenizer_bench: unstable decode\n");
  return r;
}

AzrTiming time_azr(const azr::model::BpeTokenizer& tok, const std::vector<std::string>& texts, double min_s) {
  AzrTiming r;
  r.strings = texts.size();
  for (const auto& s : texts) {
    r.bytes += s.size();
    r.tokens += tok.encode(s).size();  // warm-up pass
  }
  const bool stable = time_passes(r, min_s, r.tokens, [&] {
    size_t n = 0;
    for (const auto& s : texts) n += tok.encode(s).size();
    return n;
  });
  if (!stable) std::fprintf(stderr, "tokenizer_bench: unstable token count\n");
  return r;
}

// Runs bench.mjs; returns its JSON line, or null on failure.
json rust_bench(const fs::path& dir, const fs::path& tokenizer_json, const fs::path& corpus, double min_s,
                bool one_thread, const fs::path& tmp) {
  const fs::path out = tmp / "rust_bench.json";
  std::string cmd = std::string(one_thread ? "RAYON_NUM_THREADS=1 " : "env -u RAYON_NUM_THREADS ") + "node " +
                    sh_quote((dir / "bench.mjs").string()) + " " + sh_quote(tokenizer_json.string()) + " " +
                    sh_quote(corpus.string()) + " " + std::to_string(min_s) + " >" + sh_quote(out.string());
  if (run(cmd) != 0) {
    std::fprintf(stderr, "tokenizer_bench: failed: %s\n", cmd.c_str());
    return nullptr;
  }
  auto lines = read_lines(out);
  return lines.empty() ? json(nullptr) : json::parse(lines.back());
}

struct Diff {
  std::string name;
  size_t strings = 0, tokens = 0, mismatches = 0;
};

// encode.mjs on `corpus`, then azr on the same strings; prints the first few mismatches.
bool differential(const azr::model::BpeTokenizer& tok, const fs::path& dir, const fs::path& tokenizer_json,
                  const fs::path& corpus, const fs::path& tmp, Diff& d) {
  const fs::path ref = tmp / "rust_ids.jsonl";
  std::string cmd = "node " + sh_quote((dir / "encode.mjs").string()) + " " + sh_quote(tokenizer_json.string()) +
                    " " + sh_quote(corpus.string()) + " >" + sh_quote(ref.string());
  if (run(cmd) != 0) {
    std::fprintf(stderr, "tokenizer_bench: failed: %s\n", cmd.c_str());
    return false;
  }
  const auto texts = read_texts(corpus);
  const auto outs = read_lines(ref);
  if (outs.size() != texts.size()) {
    std::fprintf(stderr, "tokenizer_bench: %s: %zu inputs but %zu outputs\n", d.name.c_str(), texts.size(),
                 outs.size());
    return false;
  }
  d.strings = texts.size();
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto want = json::parse(outs[i]).at("ids").get<std::vector<int32_t>>();
    d.tokens += want.size();
    std::vector<int32_t> got;
    std::string err;
    try {
      got = tok.encode(texts[i]);
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (got != want || !err.empty()) {
      if (++d.mismatches <= 5)
        std::printf("MISMATCH %s #%zu %s\n  rust: %s\n  azr:  %s%s\n", d.name.c_str(), i,
                    json(texts[i]).dump(-1, ' ', true).c_str(), json(want).dump().c_str(), json(got).dump().c_str(),
                    err.empty() ? "" : (" (threw: " + err + ")").c_str());
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shared = env_or("AZR_SHARED_DIR", AZR_DEFAULT_SHARED_DIR);
  std::string tests_dir = env_or("AZR_TESTS_DIR", AZR_DEFAULT_TESTS_DIR);
  std::string python = env_or("AZR_PYTHON", AZR_DEFAULT_PYTHON);
  int diff_n = 20000;
  double min_s = 1.0;
  CLI::App app{"BpeTokenizer encode throughput against Hugging Face's Rust tokenizers, and a differential run"};
  app.add_option("--shared", shared, "shared folder (models/qwen-tokenizer, benchmarks)")->capture_default_str();
  app.add_option("--tests-dir", tests_dir, "the repository's tests/ (tokdiff scripts)")->capture_default_str();
  app.add_option("--python", python, "python3 for the corpus generator")->capture_default_str();
  app.add_option("--diff-n", diff_n, "generated strings of the differential run")->capture_default_str();
  app.add_option("--min-seconds", min_s, "least time of each timed encode")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const fs::path dir = fs::path(tests_dir) / "tokdiff";
  const fs::path tokenizer_json = fs::path(shared) / "models" / "qwen-tokenizer" / "tokenizer.json";
  TempDir tmp("azr-tokbench");

  std::string gen = sh_quote(python) + " " + sh_quote((dir / "gen_corpus.py").string()) + " bench --shared " +
                    sh_quote(shared) + " --outdir " + sh_quote(tmp.path.string()) + " >/dev/null";
  if (run(gen) != 0) {
    std::fprintf(stderr, "tokenizer_bench: corpus generation failed: %s\n", gen.c_str());
    return 1;
  }
  auto t_load = Clock::now();
  azr::model::BpeTokenizer tok(tokenizer_json.string());
  const double load_s = secs_since(t_load);

  const bool have_node = run("command -v node >/dev/null 2>&1") == 0;
  const bool have_pkg = fs::exists(dir / "node_modules" / "tokenizers" / "package.json");
  const bool have_rust = have_node && have_pkg;
  if (!have_rust)
    std::printf("Rust tokenizers unavailable (%s): azr figures only, no comparison, no differential.\n"
                "Install with: npm ci --prefix tests/tokdiff (scripts/setup.sh)\n\n",
                !have_node ? "node not on PATH" : "tests/tokdiff/node_modules/tokenizers missing");

  const unsigned cpus = std::thread::hardware_concurrency();
  std::printf("tokenizer: %s (loaded in %.3f s); %u CPUs; timing passes >= %.2f s\n\n", tokenizer_json.c_str(),
              load_s, cpus, min_s);
  std::printf("%-14s %7s %8s %9s | %8s %11s | %8s %8s %8s | %6s %6s\n", "corpus", "strings", "MB", "tokens",
              "azr MB/s", "azr tok/s", "rs 1call", "rs bat1", "rs batN", "x 1cal", "x bat1");
  json corpora = json::array();
  std::vector<std::string> decode_lines;  // the decode table, printed after the encode table
  for (const char* name : {"crux_programs", "crux_concat", "bench_text", "combining_marks"}) {
    const fs::path corpus = tmp.path / (std::string(name) + ".jsonl");
    const auto texts = read_texts(corpus);
    const AzrTiming a = time_azr(tok, texts, min_s);
    const double azr_mbs = a.bytes / 1e6 / a.seconds_per_pass;
    const AzrDecodeTiming dec = time_azr_decode(tok, texts, min_s);
    const double azr_dec_mbs = a.bytes / 1e6 / dec.seconds_per_pass;
    json row = {{"corpus", name},
                {"strings", a.strings},
                {"bytes", a.bytes},
                {"tokens", a.tokens},
                {"azr", {{"mb_per_s", azr_mbs}, {"tokens_per_s", a.tokens / a.seconds_per_pass}, {"passes", a.passes}}},
                {"azr_decode",
                 {{"mb_per_s", azr_dec_mbs},
                  {"tokens_per_s", a.tokens / dec.seconds_per_pass},
                  {"passes", dec.passes},
                  {"roundtrip_changed", dec.roundtrip_changed}}}};
    json r1, rn;
    if (have_rust) {
      r1 = rust_bench(dir, tokenizer_json, corpus, min_s, true, tmp.path);
      rn = rust_bench(dir, tokenizer_json, corpus, min_s, false, tmp.path);
    }
    double s_mbs = 0, b1_mbs = 0, bn_mbs = 0;
    if (r1.is_object()) {
      s_mbs = r1["single"]["mb_per_s"].get<double>();
      b1_mbs = r1["batch"]["mb_per_s"].get<double>();
      row["rust_single"] = r1["single"];
      row["rust_batch_1thread"] = r1["batch"];
      row["rust_tokens"] = r1["tokens"];
      row["token_counts_equal"] = r1["tokens"].get<size_t>() == a.tokens;
    }
    if (rn.is_object()) {
      bn_mbs = rn["batch"]["mb_per_s"].get<double>();
      row["rust_batch_all_threads"] = rn["batch"];
    }
    double ds_mbs = 0, db_mbs = 0;
    if (r1.is_object() && r1.contains("decode_single")) {
      ds_mbs = r1["decode_single"]["mb_per_s"].get<double>();
      db_mbs = r1["decode_batch"]["mb_per_s"].get<double>();
      row["rust_decode_single"] = r1["decode_single"];
      row["rust_decode_batch_1thread"] = r1["decode_batch"];
      row["azr_decode_vs_rust_single"] = azr_dec_mbs / ds_mbs;
      row["azr_decode_vs_rust_batch_1thread"] = azr_dec_mbs / db_mbs;
    }
    char line[256];
    std::snprintf(line, sizeof line, "%-14s %9zu %8.2f %11.0f | %8.2f %8.2f | %6.2f %6.2f | %9zu", name, a.tokens,
                  azr_dec_mbs, a.tokens / dec.seconds_per_pass, ds_mbs, db_mbs, ds_mbs > 0 ? azr_dec_mbs / ds_mbs : 0.0,
                  db_mbs > 0 ? azr_dec_mbs / db_mbs : 0.0, dec.roundtrip_changed);
    decode_lines.push_back(line);
    if (s_mbs > 0) row["azr_vs_rust_single"] = azr_mbs / s_mbs;
    if (b1_mbs > 0) row["azr_vs_rust_batch_1thread"] = azr_mbs / b1_mbs;
    if (bn_mbs > 0) row["azr_vs_rust_batch_all_threads"] = azr_mbs / bn_mbs;
    std::printf("%-14s %7zu %8.3f %9zu | %8.2f %11.0f | %8.2f %8.2f %8.2f | %6.2f %6.2f\n", name, a.strings,
                a.bytes / 1e6, a.tokens, azr_mbs, a.tokens / a.seconds_per_pass, s_mbs, b1_mbs, bn_mbs,
                s_mbs > 0 ? azr_mbs / s_mbs : 0.0, b1_mbs > 0 ? azr_mbs / b1_mbs : 0.0);
    corpora.push_back(row);
  }
  std::printf(
      "\nMB/s = UTF-8 MB (1e6 bytes) of input per second. azr: one thread. rs 1call: Rust, await encode() per\n"
      "string (includes N-API call overhead). rs bat1: encodeBatch, RAYON_NUM_THREADS=1. rs batN: encodeBatch on\n"
      "all %u CPUs. x = azr MB/s / Rust MB/s.\n\n",
      cpus);
  std::printf("%-14s %9s %8s %11s | %8s %8s | %6s %6s | %9s\n", "decode corpus", "tokens", "azr MB/s", "azr tok/s",
              "rs 1call", "rs bat1", "x 1cal", "x bat1", "NFC-diff");
  for (const auto& l : decode_lines) std::printf("%s\n", l.c_str());
  std::printf(
      "\nDecode MB/s = corpus bytes given back per second, one thread each. NFC-diff = strings whose azr\n"
      "decode(encode(s)) is not s (the tokenizer's NFC normaliser changed them).\n\n");

  json diffs = json::array();
  size_t total_strings = 0, total_mismatches = 0;
  bool diff_ok = true;
  if (have_rust) {
    const fs::path gen_corpus = tmp.path / "diff.jsonl";
    std::string g = sh_quote(python) + " " + sh_quote((dir / "gen_corpus.py").string()) + " diff --shared " +
                    sh_quote(shared) + " --n " + std::to_string(diff_n) + " --seed 7 --out " +
                    sh_quote(gen_corpus.string()) + " >/dev/null";
    if (run(g) != 0) {
      std::fprintf(stderr, "tokenizer_bench: failed: %s\n", g.c_str());
      return 1;
    }
    for (auto [name, path] : {std::pair<const char*, fs::path>{"generated", gen_corpus},
                              {"bench_text", tmp.path / "bench_text.jsonl"}}) {
      Diff d;
      d.name = name;
      const auto t0 = Clock::now();
      diff_ok = differential(tok, dir, tokenizer_json, path, tmp.path, d) && diff_ok;
      std::printf("differential %-10s %7zu strings %9zu tokens  %zu mismatches  (%.1f s)\n", name, d.strings, d.tokens,
                  d.mismatches, secs_since(t0));
      total_strings += d.strings;
      total_mismatches += d.mismatches;
      diffs.push_back({{"corpus", name}, {"strings", d.strings}, {"tokens", d.tokens}, {"mismatches", d.mismatches}});
    }
    std::printf("differential total: %zu strings, %zu mismatches\n\n", total_strings, total_mismatches);
  }

  json out = {{"bench", "tokenizer"},
              {"tokenizer", "qwen2.5"},
              {"cpus", cpus},
              {"rust_available", have_rust},
              {"rust_engine", "npm tokenizers@0.23.2"},
              {"load_s", load_s},
              {"corpora", corpora},
              {"differential", diffs},
              {"differential_strings", total_strings},
              {"differential_mismatches", total_mismatches}};
  std::printf("%s\n", out.dump().c_str());
  return (total_mismatches == 0 && diff_ok) ? 0 : 1;
}
