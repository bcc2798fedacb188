#include "eval/report.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "eval/code_bench.h"
#include "eval/cruxeval.h"
#include "eval/math_answer.h"
#include "eval/pass_at_k.h"

namespace azr::eval {

Verdict grade_math_response(std::string_view response, std::string_view gold) {
  Verdict v;
  std::optional<std::string> a = extract_math_answer(response);
  if (!a) {
    v.reason = "no_answer";
    return v;
  }
  v.extracted = *a;
  v.correct = math_equivalent(*a, gold);
  v.reason = v.correct ? "ok" : "wrong";
  return v;
}

std::vector<Verdict> grade_samples(sandbox::Pool& pool, const Benchmark& bench, const std::vector<Sample>& samples,
                                   const sandbox::Limits& limits) {
  std::vector<Verdict> out(samples.size());
  switch (bench.info.category) {
    case Category::Cruxeval: {
      const bool o = bench.info.name == "cruxeval_o";
      std::vector<CruxAnswer> answers;
      answers.reserve(samples.size());
      for (size_t i = 0; i < samples.size(); ++i) {
        out[i].extracted = extract_cruxeval_answer(samples[i].response, o);
        answers.push_back({samples[i].item, out[i].extracted});
      }
      std::vector<CruxVerdict> v = grade_cruxeval(pool, bench, answers, limits);
      for (size_t i = 0; i < v.size(); ++i) {
        out[i].correct = v[i].correct;
        out[i].reason = std::move(v[i].reason);
        out[i].detail = std::move(v[i].detail);
      }
      break;
    }
    case Category::Code: {
      std::vector<CodeProblem> problems;
      std::vector<std::string> completions;
      problems.reserve(samples.size());
      for (size_t i = 0; i < samples.size(); ++i) {
        const CodeProblem& p = bench.code.at(bench.items.at(samples[i].item).code_index);
        out[i].extracted = extract_code(samples[i].response, p);
        problems.push_back(p);
        completions.push_back(out[i].extracted);
      }
      std::vector<CodeVerdict> v = grade_code(pool, problems, completions, limits, bench.canonical.get());
      for (size_t i = 0; i < v.size(); ++i) {
        out[i].correct = v[i].passed;
        out[i].reason = std::move(v[i].reason);
        out[i].detail = std::move(v[i].detail);
      }
      break;
    }
    case Category::Math:
    case Category::Gsm8k:
      for (size_t i = 0; i < samples.size(); ++i)
        out[i] = grade_math_response(samples[i].response, bench.items.at(samples[i].item).gold);
      break;
  }
  return out;
}

BenchScore score_bench(const Benchmark& bench, const std::vector<Sample>& samples, const std::vector<Verdict>& verdicts,
                       int k) {
  BenchScore s;
  s.name = bench.info.name;
  s.category = bench.info.category;
  s.samples = samples.size();
  s.benchmark_items = bench.items.size();
  std::map<size_t, std::pair<int64_t, int64_t>> per_item;  // item -> (n, c)
  for (size_t i = 0; i < samples.size(); ++i) {
    auto& nc = per_item[samples[i].item];
    nc.first++;
    if (verdicts.at(i).correct) nc.second++;
  }
  s.items = per_item.size();
  if (per_item.empty()) return s;
  double p1 = 0, pk = 0;
  s.min_n = SIZE_MAX;
  for (auto& [item, nc] : per_item) {
    s.min_n = std::min<size_t>(s.min_n, size_t(nc.first));
    p1 += double(nc.second) / double(nc.first);
    if (k > 0 && nc.first >= k) pk += pass_at_k(nc.first, nc.second, k);
  }
  s.pass1 = p1 / double(per_item.size());
  if (k > 0 && s.min_n >= size_t(k)) s.passk = pk / double(per_item.size());
  return s;
}

namespace {

// Whether a benchmark's score enters its category's average: answered, and not one the registry
// keeps out of the paper's averages. mean_of and averaged must agree, as the report prints the
// names beside the number.
bool in_category_average(const BenchScore& b, Category c) {
  if (b.category != c || b.items == 0) return false;
  const BenchmarkInfo* info = find_benchmark(b.name);
  return !info || info->in_average;
}

std::optional<double> mean_of(const std::vector<BenchScore>& v, Category c, bool use_k) {
  double sum = 0;
  size_t n = 0;
  for (const auto& b : v) {
    if (!in_category_average(b, c)) continue;
    if (use_k) {
      if (!b.passk) return std::nullopt;
      sum += *b.passk;
    } else {
      sum += b.pass1;
    }
    n++;
  }
  if (n == 0) return std::nullopt;
  return sum / double(n);
}

std::vector<std::string> averaged(const std::vector<BenchScore>& v, Category c) {
  std::vector<std::string> names;
  for (const auto& b : v)
    if (in_category_average(b, c)) names.push_back(b.name);
  return names;
}

size_t paper_average_size(Category c) {
  size_t n = 0;
  for (const auto& b : benchmark_registry()) n += b.category == c && b.in_average;
  return n;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string pct(std::optional<double> v) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", *v * 100.0);
  return buf;
}

nlohmann::json pct_json(std::optional<double> v) {
  if (!v) return nullptr;
  return std::round(*v * 10000.0) / 100.0;
}

}  // namespace

Summary summarize(std::vector<BenchScore> scores, int k) {
  Summary s;
  s.benches = std::move(scores);
  s.k = k;
  s.code_avg = mean_of(s.benches, Category::Code, false);
  s.math_avg = mean_of(s.benches, Category::Math, false);
  s.code_avg_of = averaged(s.benches, Category::Code);
  s.math_avg_of = averaged(s.benches, Category::Math);
  if (s.code_avg && s.math_avg) s.overall = (*s.code_avg + *s.math_avg) / 2;
  if (k > 0) {
    s.code_avg_k = mean_of(s.benches, Category::Code, true);
    s.math_avg_k = mean_of(s.benches, Category::Math, true);
    if (s.code_avg_k && s.math_avg_k) s.overall_k = (*s.code_avg_k + *s.math_avg_k) / 2;
  }
  return s;
}

std::string format_table(const Summary& s) {
  const bool with_k = s.k > 0;
  const std::string kcol = "pass@" + std::to_string(s.k);
  std::string out;
  char line[256];
  auto row = [&](const std::string& name, const std::string& cat, const std::string& items, const std::string& n,
                 const std::string& p1, const std::string& pk) {
    if (with_k)
      std::snprintf(line, sizeof line, "%-16s %-9s %7s %8s %8s %8s\n", name.c_str(), cat.c_str(), items.c_str(),
                    n.c_str(), p1.c_str(), pk.c_str());
    else
      std::snprintf(line, sizeof line, "%-16s %-9s %7s %8s %8s\n", name.c_str(), cat.c_str(), items.c_str(), n.c_str(),
                    p1.c_str());
    out += line;
  };
  row("benchmark", "category", "items", "samples", "pass@1", kcol);
  for (Category c : {Category::Code, Category::Math, Category::Gsm8k, Category::Cruxeval})
    for (const auto& b : s.benches)
      if (b.category == c)
        row(b.name, category_name(b.category),
            std::to_string(b.items) + (b.benchmark_items > b.items ? "/" + std::to_string(b.benchmark_items) : ""),
            std::to_string(b.samples),
            b.items ? pct(b.pass1) : "-", pct(b.passk));
  out += "\n";
  row("code avg", "", "", "", pct(s.code_avg), pct(s.code_avg_k));
  row("math avg", "", "", "", pct(s.math_avg), pct(s.math_avg_k));
  row("overall", "", "", "", pct(s.overall), pct(s.overall_k));
  if (!s.code_avg_of.empty())
    out += "code avg of " + joined(s.code_avg_of) +
           " (the paper's also has LiveCodeBench, which azr lacks: this code avg and overall are not its figures)\n";
  if (!s.math_avg_of.empty() && s.math_avg_of.size() < paper_average_size(Category::Math))
    out += "math avg of " + joined(s.math_avg_of) + " (" + std::to_string(s.math_avg_of.size()) + " of the paper's " +
           std::to_string(paper_average_size(Category::Math)) + ")\n";
  return out;
}

nlohmann::json summary_json(const Summary& s) {
  nlohmann::json j;
  j["benchmarks"] = nlohmann::json::array();
  for (const auto& b : s.benches) {
    nlohmann::json e{{"bench", b.name},          {"category", category_name(b.category)},
                     {"items", b.items},         {"benchmark_items", b.benchmark_items},
                     {"samples", b.samples},     {"pass@1", b.items ? pct_json(b.pass1) : nullptr}};
    if (s.k > 0) e["pass@" + std::to_string(s.k)] = pct_json(b.passk);
    j["benchmarks"].push_back(e);
  }
  j["code_avg"] = pct_json(s.code_avg);
  j["math_avg"] = pct_json(s.math_avg);
  j["overall"] = pct_json(s.overall);
  j["code_avg_of"] = s.code_avg_of;
  j["math_avg_of"] = s.math_avg_of;
  if (s.k > 0) {
    j["k"] = s.k;
    j["code_avg@k"] = pct_json(s.code_avg_k);
    j["math_avg@k"] = pct_json(s.math_avg_k);
    j["overall@k"] = pct_json(s.overall_k);
  }
  return j;
}

}  // namespace azr::eval
