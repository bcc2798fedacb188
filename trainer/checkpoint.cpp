#include "trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
// Header-only (XXH_INLINE_ALL): no shared library to ship beside azr.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <vector>

#include "model/json_text.h"

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
  j["in_a_row"] = {{"not_finite", s.not_finite_in_a_row},
                   {"proposer_lost", s.proposer_lost_in_a_row},
                   {"solver_lost", s.solver_lost_in_a_row}};
  if (!s.prompt_style.empty()) j["prompt_style"] = s.prompt_style;
  // write_checkpoint adds the manifest beside this file: a checkpoint that says so and lacks it
  // lost it (verify_checksums), where a missing manifest alone passed as an older checkpoint's.
  j["checksums"] = kChecksumsFile;
  return j.dump(2) + "\n";
}

namespace {

// std::mt19937_64's text state, as operator<< writes it: its 312 words, and with libstdc++ its
// position (0 to 312; libc++ writes the words alone). operator>> checks neither the count nor the
// position, and a state of all zeros gives 0 for ever: a damaged state would resume quietly on
// another stream than the run's.
std::string mt19937_64_state_error(const std::string& text) {
  constexpr size_t kWords = std::mt19937_64::state_size;
  std::vector<uint64_t> v;
  for (const char *p = text.data(), *end = p + text.size(); p < end;) {
    if (*p == ' ') {
      ++p;
      continue;
    }
    uint64_t x = 0;
    const auto [next, ec] = std::from_chars(p, end, x);
    if (ec != std::errc() || (next != end && *next != ' ')) return "is not a list of 64-bit words";
    v.push_back(x);
    p = next;
  }
  if (v.size() != kWords && v.size() != kWords + 1)
    return "holds " + std::to_string(v.size()) + " numbers, not " + std::to_string(kWords) + " or " +
           std::to_string(kWords + 1);
  if (v.size() == kWords + 1 && v.back() > kWords) return "has a position past " + std::to_string(kWords);
  if (std::all_of(v.begin(), v.begin() + kWords, [](uint64_t w) { return w == 0; })) return "is all zeros";
  return "";
}

}  // namespace

TrainerState read_trainer_state(const fs::path& file) {
  std::string text;
  if (const std::string why = model::read_file_at_most(file.string(), size_t(1) << 20, text); !why.empty())
    throw std::runtime_error(file.string() + ": cannot read the trainer state (" + why + ")");
  TrainerState s;
  const auto bad = [&](const std::string& why) {
    return std::runtime_error(file.string() + ": not a valid trainer state: " + why);
  };
  try {
    const nlohmann::json j = model::parse_json_bounded(text);
    s.step = j.at("step").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
    s.data_rng = j.at("data_rng").get<std::string>();
    s.world_size = j.at("world_size").get<int>();
    const auto& b = j.at("buffer_tasks");
    s.buffer_tasks[0] = b.at("deduction").get<int64_t>();
    s.buffer_tasks[1] = b.at("abduction").get<int64_t>();
    s.buffer_tasks[2] = b.at("induction").get<int64_t>();
    if (j.contains("in_a_row")) {
      const auto& r = j.at("in_a_row");
      s.not_finite_in_a_row = r.at("not_finite").get<int>();
      s.proposer_lost_in_a_row = r.at("proposer_lost").get<int>();
      s.solver_lost_in_a_row = r.at("solver_lost").get<int>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw bad(model::json_error_text(e));
  } catch (const model::JsonTooDeep& e) {
    throw bad(e.what());
  }
  // The step names the checkpoint's directory: a step that is not its N (negative, or one that
  // overflows when the run goes on) would write checkpoints that no listing finds and no pruning
  // removes.
  const std::string dir = file.parent_path().filename().string();
  if (s.step < 0) throw bad("step " + std::to_string(s.step) + " is negative");
  if (dir.rfind("step-", 0) == 0 && dir != "step-" + std::to_string(s.step))
    throw bad("step " + std::to_string(s.step) + " is not the " + dir + " it is in");
  if (s.world_size < 1) throw bad("world_size " + std::to_string(s.world_size) + " is not positive");
  for (const int64_t n : s.buffer_tasks)
    if (n < 0) throw bad("buffer_tasks holds a negative count, " + std::to_string(n));
  for (const int n : {s.not_finite_in_a_row, s.proposer_lost_in_a_row, s.solver_lost_in_a_row})
    if (n < 0) throw bad("in_a_row holds a negative count, " + std::to_string(n));
  if (const std::string why = mt19937_64_state_error(s.data_rng); !why.empty()) throw bad("data_rng " + why);
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

namespace {

// XXH3-128 of a file's bytes, as xxh128sum prints it: the canonical (big-endian) bytes in hex.
std::string xxh128_hex(const fs::path& file) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state) throw std::bad_alloc();
  XXH3_128bits_reset(state.get());
  std::vector<char> buf(size_t(4) << 20);  // 4 MiB reads: a checkpoint is gigabytes
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);  // nothing below throws until close
  if (fd < 0) throw std::runtime_error(file.string() + ": cannot read it: " + std::strerror(errno));
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error(file.string() + ": read failed: " + std::strerror(err));
    }
    if (n == 0) break;
    XXH3_128bits_update(state.get(), buf.data(), size_t(n));
  }
  ::close(fd);
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state.get()));
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : canonical.digest) hex += {kHex[b >> 4], kHex[b & 15]};
  return hex;
}

}  // namespace

void write_checksums(const fs::path& dir) {
  std::map<std::string, std::string> sums;  // by name: the manifest reads the same every time
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == kChecksumsFile || !e.is_regular_file()) continue;
    sums[name] = xxh128_hex(e.path());
  }
  std::string text;
  for (const auto& [name, hex] : sums) text += hex + "  " + name + "\n";
  const fs::path manifest = dir / kChecksumsFile;
  std::ofstream out(manifest, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw std::runtime_error(manifest.string() + ": write failed");
}

bool verify_checksums(const fs::path& dir) {
  const fs::path manifest = dir / kChecksumsFile;
  if (!fs::exists(manifest)) {
    // Checkpoints from before the manifests have none; one whose state names its manifest lost it.
    std::string state;
    const fs::path state_file = dir / "trainer_state.json";
    if (model::read_file_at_most(state_file.string(), size_t(1) << 20, state).empty() &&
        state.find("\"checksums\"") != std::string::npos)
      throw std::runtime_error(manifest.string() + ": missing, though " + state_file.string() +
                               " says the checkpoint was written with it; nothing in it can be checked");
    return false;
  }
  std::ifstream in(manifest, std::ios::binary);
  if (!in) throw std::runtime_error(manifest.string() + ": cannot read it");
  std::string line;
  int line_no = 0;
  std::set<std::string> listed;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = manifest.string() + ":" + std::to_string(line_no);
    // `<32 hex>  <name>`, a plain name in this directory.
    const bool hex_ok = line.size() > 34 && line.compare(32, 2, "  ") == 0 &&
                        std::all_of(line.begin(), line.begin() + 32, [](char c) {
                          return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                        });
    const std::string name = hex_ok ? line.substr(34) : "";
    if (!hex_ok || name.find('/') != std::string::npos || name == "." || name == "..")
      throw std::runtime_error(where + ": not a checksum line (`<32 hex digits>  <file name>`)");
    listed.insert(name);
    const fs::path file = dir / name;
    if (!fs::is_regular_file(file))
      throw std::runtime_error(file.string() + ": missing from the checkpoint (" + where + " names it)");
    if (xxh128_hex(file) != line.substr(0, 32))
      throw std::runtime_error(file.string() + ": does not match its checksum in " + where +
                               ": the file changed after the checkpoint was written (a damaged disk or an "
                               "incomplete copy); resume from an older checkpoint by moving this one away");
  }
  // Every file is listed: a manifest cut short (an interrupted copy) checks nothing it lost, and
  // a file it does not know could be what a loader reads (a model.safetensors beside shards).
  if (listed.empty()) throw std::runtime_error(manifest.string() + ": empty (an interrupted copy?)");
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name != kChecksumsFile && !listed.count(name))
      throw std::runtime_error(e.path().string() + ": not in the checkpoint's " + kChecksumsFile +
                               " (the manifest was cut short, or the file was added after the checkpoint was written)");
  }
  return true;
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  const fs::path dir = run_dir / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !e.is_directory()) continue;
    // Only step-N with N a whole number that fits: a stray step-99999999999999999999 is not a
    // checkpoint (std::stoll threw on it, which ended the run at its next pruning).
    const std::string digits = name.substr(5);
    const bool digits_only = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](unsigned char c) {
      return c >= '0' && c <= '9';
    });
    int64_t n = 0;
    if (!digits_only || std::from_chars(digits.data(), digits.data() + digits.size(), n).ec != std::errc()) continue;
    if (name != "step-" + std::to_string(n)) continue;  // step-0012: not a name write_checkpoint gives
    if (!fs::exists(e.path() / "trainer_state.json")) continue;
    out.emplace_back(n, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  auto all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

namespace {

// The .step-N.tmp and .step-N.old directories a killed write or pruning left (a SIGKILL after a
// scheduler's SIGTERM lands in the checkpoint that SIGTERM asked for). Removed before a write too:
// left until a write succeeds, a 7B run's tens of GB could fill the disk that write needs, and
// every later resume would fail at the same step.
void remove_leftovers(const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 4 && n[0] == '.' && (n.ends_with(".tmp") || n.ends_with(".old"))) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

fs::path write_checkpoint(const fs::path& run_dir, const TrainerState& state,
                          const std::function<void(const fs::path&)>& write_contents, int keep_last) {
  const fs::path dir = run_dir / "checkpoints";
  fs::create_directories(dir);
  remove_leftovers(dir);
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
    write_checksums(tmp);  // before the syncs below, which cover the manifest too
    for (const fs::directory_entry& e : fs::directory_iterator(tmp)) sync_path(e.path());
    sync_path(tmp);
  } catch (...) {  // a full disk: the partial checkpoint would hold the space the run needs next
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  // A checkpoint of the same step from an earlier life of the run (before a resume from an
  // older one) is replaced: moved aside first, so a kill between the renames leaves its files in
  // .step-N.old rather than a step-N that is part old and part new.
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
  remove_leftovers(dir);
  return final_path;
}

}  // namespace azr::trainer
