#include "trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace azr::trainer {

namespace fs = std::filesystem;

std::string trainer_state_json(const TrainerState& s) {
  nlohmann::ordered_json j;
  j["step"] = s.step;
  j["seed"] = s.seed;
  j["data_rng"] = s.data_rng;
  j["world_size"] = s.world_size;
  j["buffer_tasks"] = {{"deduction", s.buffer_tasks[0]}, {"abduction", s.buffer_tasks[1]},
                       {"induction", s.buffer_tasks[2]}};
  return j.dump(2) + "\n";
}

TrainerState read_trainer_state(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file.string() + ": cannot read the trainer state");
  TrainerState s;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    s.step = j.at("step").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    s.data_rng = j.at("data_rng").get<std::string>();
    s.world_size = j.at("world_size").get<int>();
    const auto& b = j.at("buffer_tasks");
    s.buffer_tasks[0] = b.at("deduction").get<int64_t>();
    s.buffer_tasks[1] = b.at("abduction").get<int64_t>();
    s.buffer_tasks[2] = b.at("induction").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(file.string() + ": not a valid trainer state: " + e.what());
  }
  return s;
}

void sync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(p.string() + ": cannot open to sync it: " + std::strerror(errno));
  // A failed fsync is not retried: Linux marks the pages clean after a failed write-back, so a
  // second call could succeed with the data lost. The caller must not publish what it wrote.
  // EINVAL: the filesystem cannot sync this kind of file (some cannot sync directories).
  const bool ok = ::fsync(fd) == 0 || errno == EINVAL;
  const int err = errno;
  ::close(fd);
  if (!ok) throw std::runtime_error(p.string() + ": fsync failed: " + std::strerror(err));
}

void write_synced(const fs::path& file, const std::string& text) {
  {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) throw std::runtime_error(file.string() + ": write failed");
  }
  sync_path(file);
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  const fs::path dir = run_dir / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !e.is_directory()) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    if (!fs::exists(e.path() / "trainer_state.json")) continue;
    out.emplace_back(std::stoll(digits), e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  auto all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

fs::path write_checkpoint(const fs::path& run_dir, const TrainerState& state,
                          const std::function<void(const fs::path&)>& write_contents, int keep_last) {
  const fs::path dir = run_dir / "checkpoints";
  fs::create_directories(dir);
  const std::string name = "step-" + std::to_string(state.step);
  const fs::path tmp = dir / ("." + name + ".tmp"), final_path = dir / name;
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    write_contents(tmp);
    {
      std::ofstream out(tmp / "trainer_state.json");
      out << trainer_state_json(state);
      if (!out.flush()) throw std::runtime_error((tmp / "trainer_state.json").string() + ": write failed");
    }
    for (const fs::directory_entry& e : fs::directory_iterator(tmp)) sync_path(e.path());
    sync_path(tmp);
  } catch (...) {  // a full disk: the partial checkpoint would hold the space the run needs next
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  // A checkpoint of the same step from an earlier life of the run (before a resume from an
  // older one) is replaced: moved aside first, so some complete step-N exists at every moment.
  if (fs::exists(final_path)) {
    const fs::path old = dir / ("." + name + ".old");
    fs::remove_all(old);
    fs::rename(final_path, old);
    fs::rename(tmp, final_path);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, final_path);
  }
  sync_path(dir);
  if (keep_last > 0) {
    // Renamed out of list_checkpoints' sight first: removed in place, a kill part-way could leave
    // a step-K with its trainer_state.json but without some of its files.
    auto all = list_checkpoints(run_dir);
    for (size_t i = 0; i + size_t(keep_last) < all.size(); i++) {
      const fs::path doomed = dir / ("." + all[i].second.filename().string() + ".old");
      fs::remove_all(doomed);
      fs::rename(all[i].second, doomed);
      fs::remove_all(doomed);
    }
  }
  // Left-overs of a crash in an earlier write.
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 4 && n[0] == '.' && (n.ends_with(".tmp") || n.ends_with(".old"))) fs::remove_all(e.path(), ec);
  }
  return final_path;
}

}  // namespace azr::trainer
