#include "proposer/seeding.h"

#include <random>

#include "buffer/seeded_random.h"
#include "proposer/prompts.h"
#include "proposer/seed.h"

namespace azr::proposer {

using buffer::TaskType;

namespace {

int64_t count_of(const buffer::TaskBuffer& b, TaskType t) { return b.counts().by_type[int(t)]; }

}  // namespace

buffer::Task induction_source(const buffer::TaskBuffer& b, std::mt19937_64& rng) {
  const int64_t ded = count_of(b, TaskType::Deduction), abd = count_of(b, TaskType::Abduction);
  const TaskType from =
      buffer::uniform_below(rng, uint64_t(ded + abd)) < uint64_t(ded) ? TaskType::Deduction : TaskType::Abduction;
  return b.sample_references(from, 1, rng).at(0);
}

SeedingReport grow_seed_buffer(buffer::TaskBuffer& buffer, sandbox::Pool& pool, const GenerateFn& generate,
                               const SeedingSettings& s) {
  SeedingReport report;
  std::mt19937_64 rng(s.seed);
  for (TaskType t : {TaskType::Deduction, TaskType::Abduction, TaskType::Induction})
    if (count_of(buffer, t) == 0) report.inserted[int(t)] += buffer.insert({identity_seed(t)}).inserted;

  auto full = [&](TaskType t) { return count_of(buffer, t) >= s.target; };
  for (; report.rounds < s.max_rounds; report.rounds++) {
    if (full(TaskType::Deduction) && full(TaskType::Abduction) && full(TaskType::Induction)) break;
    for (TaskType type : {TaskType::Deduction, TaskType::Abduction, TaskType::Induction}) {
      if (full(type)) continue;
      if (s.stop && s.stop()) {
        report.stopped = true;
        return report;
      }
      std::vector<std::string> prompts, programs;
      for (int i = 0; i < s.batch; i++) {
        if (type == TaskType::Induction) {
          programs.push_back(induction_source(buffer, rng).program);
          prompts.push_back(induction_proposer_prompt(programs.back(), s.parse.num_inputs, s.prompt_style));
        } else {
          prompts.push_back(code_proposer_prompt(type, buffer.sample_references(type, s.k, rng), s.parse.banned_words,
                                                s.prompt_style, s.validate.limits.cpu_seconds));
        }
      }
      const std::vector<std::string> generations = generate(prompts);
      std::vector<Proposal> parsed;
      for (size_t i = 0; i < generations.size() && i < prompts.size(); i++) {
        report.proposals++;
        ParseResult r = parse_proposal(type, generations[i], type == TaskType::Induction ? programs[i] : "", s.parse);
        if (r.check.ok)
          parsed.push_back(std::move(r.proposal));
        else
          report.rejected[r.check.reason]++;
      }
      std::vector<buffer::Task> valid;
      for (ValidationResult& v : validate(pool, parsed, s.validate)) {
        if (!v.check.ok) {
          report.rejected[v.check.reason]++;
          continue;
        }
        v.task.origin = buffer::Origin::Seed;
        v.task.step = 0;
        valid.push_back(std::move(v.task));
      }
      // Never past the target: the reference truncates the seed lists to exactly B * 4.
      const int64_t room = s.target - count_of(buffer, type);
      if (int64_t(valid.size()) > room) valid.resize(size_t(std::max<int64_t>(room, 0)));
      const buffer::InsertResult ins = buffer.insert(valid);
      report.inserted[int(type)] += ins.inserted;
      report.duplicates += ins.duplicates;
    }
  }
  report.reached_target = full(TaskType::Deduction) && full(TaskType::Abduction) && full(TaskType::Induction);
  return report;
}

}  // namespace azr::proposer
