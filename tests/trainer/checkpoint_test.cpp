// Checkpoint files on disk (trainer/checkpoint.h): what a failure leaves behind, and that a
// failed sync is an error. The kill -9 and resume paths run end to end in train_cli_test.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "trainer/checkpoint.h"

namespace {

namespace fs = std::filesystem;
using azr::trainer::list_checkpoints;
using azr::trainer::TrainerState;
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

}  // namespace
