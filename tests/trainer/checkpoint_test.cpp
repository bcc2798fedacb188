// Checkpoint files on disk (trainer/checkpoint.h): what a failure leaves behind, that a failed sync
// is an error, and the checksum manifest, held to Debian's xxh128sum. The kill -9 and resume paths
// run end to end in train_cli_test.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/test_support.h"
#include "trainer/checkpoint.h"
#include "trainer/model_setup.h"
#include "trainer/run_lock.h"

namespace {

namespace fs = std::filesystem;
using azr::trainer::list_checkpoints;
using azr::trainer::TrainerState;
using azr::trainer::verify_checksums;
using azr::trainer::write_checkpoint;

class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = fs::temp_directory_path() / ("azr-checkpoint-test-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(run_);
    fs::create_directories(run_);
  }
  void TearDown() override { fs::remove_all(run_); }
  static TrainerState state(int64_t step) {
    TrainerState s;
    s.step = step;
    return s;
  }
  static void weights(const fs::path& dir) { std::ofstream(dir / "model.safetensors") << "weights"; }
  fs::path run_;
};

// A sync that cannot happen is an error naming the path (it was ignored: a checkpoint could be
// published, and older ones pruned, with its files never on disk).
TEST_F(CheckpointFiles, SyncOfAPathThatCannotBeOpenedThrows) {
  EXPECT_NO_THROW(azr::trainer::sync_path(run_));
  try {
    azr::trainer::sync_path(run_ / "missing");
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find((run_ / "missing").string()), std::string::npos) << e.what();
  }
}

// A write that fails part-way (a full disk) leaves no temporary directory holding the space.
TEST_F(CheckpointFiles, AFailedWriteLeavesNothing) {
  EXPECT_THROW(write_checkpoint(run_, state(3),
                                [](const fs::path& dir) {
                                  weights(dir);
                                  throw std::runtime_error("No space left on device");
                                },
                                0),
               std::runtime_error);
  EXPECT_TRUE(list_checkpoints(run_).empty());
  for (const auto& e : fs::directory_iterator(run_ / "checkpoints")) ADD_FAILURE() << "left " << e.path();
}

// A partial checkpoint a kill left under another step's name (.step-23.tmp, the checkpoint a
// SIGTERM asked for, killed part-way) goes before the next write, not only after one succeeds: a
// write that then fails for want of space left it to fail every resume at the same step.
TEST_F(CheckpointFiles, AKilledWritesLeftoversGoBeforeTheNextWrite) {
  const fs::path stale_tmp = run_ / "checkpoints" / ".step-23.tmp", stale_old = run_ / "checkpoints" / ".step-9.old";
  for (const fs::path& p : {stale_tmp, stale_old}) {
    fs::create_directories(p);
    weights(p);
  }
  bool seen_during_write = true;
  EXPECT_THROW(write_checkpoint(run_, state(30),
                                [&](const fs::path& dir) {
                                  seen_during_write = fs::exists(stale_tmp) || fs::exists(stale_old);
                                  weights(dir);
                                  throw std::runtime_error("No space left on device");
                                },
                                0),
               std::runtime_error);
  EXPECT_FALSE(seen_during_write);
  for (const auto& e : fs::directory_iterator(run_ / "checkpoints")) ADD_FAILURE() << "left " << e.path();
}

// keep_last prunes to the newest N, whole (each is renamed aside before its files go, so a kill
// part-way cannot leave a step-K that list_checkpoints takes for complete; not killed here).
TEST_F(CheckpointFiles, PruningKeepsTheNewestAndLeavesNoPart) {
  for (int64_t step = 1; step <= 4; ++step) write_checkpoint(run_, state(step), weights, 2);
  const auto kept = list_checkpoints(run_);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].first, 3);
  EXPECT_EQ(kept[1].first, 4);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(run_ / "checkpoints")) {
    ++entries;
    EXPECT_TRUE(fs::exists(e.path() / "model.safetensors")) << e.path();
  }
  EXPECT_EQ(entries, 2);
}


// xxh128sum -c on the manifest in `dir`: exit 0 when every file matches. The independent check
// of our XXH3-128 and of the manifest's format.
azr::testing::ProcessResult xxh128sum_check(const fs::path& dir) {
  return azr::testing::run_process(
      {"/bin/sh", "-c", "cd \"$1\" && xxh128sum --strict -c checksums.xxh128", "sh", dir.string()});
}

bool have_xxh128sum() { return azr::testing::run_process({"/bin/sh", "-c", "command -v xxh128sum"}).exit_code == 0; }

std::string verify_error(const fs::path& dir) {
  try {
    verify_checksums(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

// Every file but the manifest is in it, by name, with the checksum xxh128sum computes: a file of
// several of the hash's 4 MiB reads, one of a few bytes and an empty one.
TEST_F(CheckpointFiles, TheManifestIsXxh128sumsOwn) {
  const fs::path ck = write_checkpoint(run_, state(1), [](const fs::path& dir) {
    std::string big(9u << 20, '\0');
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
    std::ofstream(dir / "model.safetensors", std::ios::binary) << big;
    std::ofstream(dir / "config.json") << "{}";
    std::ofstream(dir / "empty");
  }, 0);
  EXPECT_TRUE(verify_checksums(ck));
  std::ifstream in(ck / "checksums.xxh128");
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) names.push_back(line.substr(34));
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "empty", "model.safetensors", "trainer_state.json"}));
  if (!have_xxh128sum())
    GTEST_SKIP() << "xxh128sum not installed (Debian package xxhash; scripts/setup.sh installs it)";
  const auto r = xxh128sum_check(ck);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

// One changed byte, a missing file, a line that is not one of ours: each is named. xxh128sum
// agrees about the changed byte.
TEST_F(CheckpointFiles, ADamagedCheckpointIsNamedFileByFile) {
  const fs::path ck = write_checkpoint(run_, state(2), [](const fs::path& dir) {
    weights(dir);
    std::ofstream(dir / "optimizer.safetensors") << "moments";
  }, 0);
  {
    std::fstream f(ck / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('X');  // "weights" -> "weiXhts"
  }
  std::string why = verify_error(ck);
  EXPECT_NE(why.find((ck / "model.safetensors").string() + ": does not match its checksum"), std::string::npos)
      << why;
  EXPECT_NE(why.find("checksums.xxh128:1"), std::string::npos) << why;  // model.safetensors, line 1 by name
  if (have_xxh128sum()) {
    EXPECT_NE(xxh128sum_check(ck).exit_code, 0);
  }

  weights(ck);  // mended
  EXPECT_TRUE(verify_checksums(ck));
  fs::remove(ck / "optimizer.safetensors");
  why = verify_error(ck);
  EXPECT_NE(why.find((ck / "optimizer.safetensors").string() + ": missing"), std::string::npos) << why;

  std::ofstream(ck / "optimizer.safetensors") << "moments";
  std::ofstream(ck / "checksums.xxh128", std::ios::app) << "0123  trainer_state.json\n";
  why = verify_error(ck);
  EXPECT_NE(why.find("checksums.xxh128:4: not a checksum line"), std::string::npos) << why;
  std::ofstream(ck / "checksums.xxh128", std::ios::trunc)
      << "00000000000000000000000000000000  ../step-1/model.safetensors\n";
  why = verify_error(ck);
  EXPECT_NE(why.find("checksums.xxh128:1: not a checksum line"), std::string::npos) << why;
}

// A manifest cut short (an interrupted copy) or a file it does not name is refused: the unnamed
// file could be what a loader reads.
TEST_F(CheckpointFiles, AFileTheManifestDoesNotNameIsRefused) {
  const fs::path ck = write_checkpoint(run_, state(3), weights, 0);
  std::ofstream(ck / "model-00001-of-00002.safetensors") << "a shard";
  std::string why = verify_error(ck);
  EXPECT_NE(why.find((ck / "model-00001-of-00002.safetensors").string() + ": not in the checkpoint's"),
            std::string::npos)
      << why;
  fs::remove(ck / "model-00001-of-00002.safetensors");
  EXPECT_TRUE(verify_checksums(ck));
  std::string first;
  std::getline(std::ifstream(ck / "checksums.xxh128"), first);  // model.safetensors
  std::ofstream(ck / "checksums.xxh128", std::ios::trunc) << first << "\n";
  why = verify_error(ck);
  EXPECT_NE(why.find((ck / "trainer_state.json").string() + ": not in the checkpoint's"), std::string::npos) << why;
  std::ofstream(ck / "checksums.xxh128", std::ios::trunc);
  why = verify_error(ck);
  EXPECT_NE(why.find("checksums.xxh128: empty"), std::string::npos) << why;
}

// A checkpoint from before the manifests: nothing to check, and no error. One written since,
// whose trainer_state.json names its manifest, lost it: refused, where it passed unchecked.
TEST_F(CheckpointFiles, ACheckpointWithoutAManifestIsNotChecked) {
  const fs::path ck = write_checkpoint(run_, state(1), weights, 0);
  fs::remove(ck / "checksums.xxh128");
  const std::string why = verify_error(ck);
  EXPECT_NE(why.find((ck / "checksums.xxh128").string() + ": missing, though " + (ck / "trainer_state.json").string() +
                     " says the checkpoint was written with it"),
            std::string::npos)
      << why;
  azr::testing::as_written_before_manifests(ck);
  EXPECT_FALSE(verify_checksums(ck));
}

// The trainer state a resume starts from: each field a run could not have written is refused,
// naming the file, where a resume went on quietly from it.
TEST_F(CheckpointFiles, AStateNoRunWritesIsRefused) {
  std::mt19937_64 rng(5);
  rng.discard(1000);  // a position inside the state, not 312
  std::ostringstream rng_text;
  rng_text << rng;
  TrainerState good = state(3);
  good.data_rng = rng_text.str();
  good.not_finite_in_a_row = 2, good.proposer_lost_in_a_row = 1, good.solver_lost_in_a_row = 0;
  const fs::path ck = write_checkpoint(run_, good, weights, 0);
  const fs::path file = ck / "trainer_state.json";
  const nlohmann::json written = nlohmann::json::parse(std::ifstream(file));
  const TrainerState back = azr::trainer::read_trainer_state(file);
  EXPECT_EQ(back.step, 3);
  EXPECT_EQ(back.data_rng, good.data_rng);
  EXPECT_EQ(back.not_finite_in_a_row, 2);
  EXPECT_EQ(back.proposer_lost_in_a_row, 1);
  EXPECT_EQ(back.solver_lost_in_a_row, 0);
  {  // a checkpoint from before the counts were kept: none in a row
    nlohmann::json older = written;
    older.erase("in_a_row");
    std::ofstream(file, std::ios::trunc) << older.dump();
    const TrainerState o = azr::trainer::read_trainer_state(file);
    EXPECT_EQ(o.not_finite_in_a_row + o.proposer_lost_in_a_row + o.solver_lost_in_a_row, 0);
  }
  std::mt19937_64 restored;
  std::istringstream(back.data_rng) >> restored;
  EXPECT_EQ(restored(), rng());

  std::string zeros;
  for (int i = 0; i < 312; i++) zeros += "0 ";
  const std::string words = good.data_rng.substr(0, good.data_rng.rfind(' '));  // without the position
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"is negative", {{"step", -7}}},
      {"is not the step-3", {{"step", 4}}},
      {"is not the step-3", {{"step", INT64_MAX}}},
      {"world_size 0", {{"world_size", 0}}},
      {"negative count", {{"buffer_tasks", {{"deduction", -1}, {"abduction", 0}, {"induction", 0}}}}},
      {"in_a_row holds a negative count, -1",
       {{"in_a_row", {{"not_finite", 0}, {"proposer_lost", 0}, {"solver_lost", -1}}}}},
      {"solver_lost", {{"in_a_row", {{"not_finite", 0}, {"proposer_lost", 0}}}}},
      {"data_rng is not a list", {{"data_rng", "garbage"}}},
      {"data_rng holds 311 numbers", {{"data_rng", words.substr(0, words.rfind(' '))}}},
      {"data_rng has a position past 312", {{"data_rng", words + " 999"}}},
      {"data_rng is all zeros", {{"data_rng", zeros + "312"}}},
  };
  for (const auto& [want, change] : cases) {
    nlohmann::json j = written;
    j.update(change);
    std::ofstream(file, std::ios::trunc) << j.dump();
    try {
      azr::trainer::read_trainer_state(file);
      ADD_FAILURE() << "taken: " << change.dump();
    } catch (const std::runtime_error& e) {
      const std::string why = e.what();
      EXPECT_EQ(why.rfind(file.string() + ": not a valid trainer state: ", 0), 0u) << why;
      EXPECT_NE(why.find(want), std::string::npos) << why;
    }
  }
  // 100,000 nested arrays: an error, not a stack overflow.
  std::ofstream(file, std::ios::trunc) << "{\"step\": " << std::string(100000, '[') << std::string(100000, ']') << "}";
  EXPECT_THROW(azr::trainer::read_trainer_state(file), std::runtime_error);
}

// A directory named step-N whose N does not fit 64 bits is not a checkpoint, and listing skips it:
// std::stoll threw on it, and listing runs at every checkpoint's pruning, so the run ended.
TEST_F(CheckpointFiles, AStepNumberPast64BitsIsNotACheckpoint) {
  write_checkpoint(run_, state(2), weights, 0);
  for (const char* name : {"step-99999999999999999999", "step-\xc3\xa9", "step--1", "step-+1", "step-0012"}) {
    fs::create_directories(run_ / "checkpoints" / name);
    std::ofstream(run_ / "checkpoints" / name / "trainer_state.json") << "{}";
  }
  const auto all = list_checkpoints(run_);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first, 2);
}

}  // namespace

// The run directory's lock (trainer/run_lock.h): held by the process that took it and by no child
// of it, so a sandbox process outliving a killed trainer does not keep its directory locked, and
// dropped when that process ends, however it ends.
TEST_F(CheckpointFiles, TheRunLockIsTheTakersAloneAndEndsWithIt) {
  using azr::trainer::run_lock_holder;
  using azr::trainer::RunDirLock;
  EXPECT_FALSE(run_lock_holder(run_)) << "no lock file: no holder";
  int taken[2], go[2];
  ASSERT_EQ(pipe(taken), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t taker = fork();
  ASSERT_GE(taker, 0);
  if (taker == 0) {
    RunDirLock lock(run_);
    const pid_t child = fork();  // the taker's child: alive past the taker's end, holding its descriptors
    if (child == 0) {
      sleep(30);
      _exit(0);
    }
    char c = 0;
    if (write(taken[1], &child, sizeof child) != sizeof child || read(go[0], &c, 1) != 1) _exit(1);
    _exit(0);  // no destructor: the lock ends with the process, as at a kill -9
  }
  pid_t child = -1;
  ASSERT_EQ(read(taken[0], &child, sizeof child), ssize_t(sizeof child));
  struct KillAtEnd {
    pid_t pid;
    ~KillAtEnd() { kill(pid, SIGKILL); }
  } kill_child{child};
  char c = 0;
  const std::optional<std::string> holder = run_lock_holder(run_);
  ASSERT_TRUE(holder);
  EXPECT_EQ(holder->rfind("azr train, pid " + std::to_string(taker) + " on host ", 0), 0u) << *holder;
  try {
    RunDirLock second(run_);
    ADD_FAILURE() << "a second lock was taken";
  } catch (const azr::trainer::UserError& e) {
    EXPECT_NE(std::string(e.what()).find(run_.string() + ": in use by another " + *holder), std::string::npos)
        << e.what();
  }
  ASSERT_EQ(write(go[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(taker, &status, 0), taker);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(run_lock_holder(run_)) << "held after its taker ended, by the taker's child";
  EXPECT_EQ(kill(child, 0), 0) << "the taker's child ended too soon to tell";
  RunDirLock mine(run_);  // taken at once
  EXPECT_TRUE(fs::exists(run_ / azr::trainer::kRunLockFile));
}
