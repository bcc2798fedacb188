// kernels/memory_meter.h: the bytes held and their peak, against sums worked out by hand.
#include "kernels/memory_meter.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace azr::kernels {
namespace {

TEST(MemoryMeter, CountsWhatIsHeldAndTheMostEverHeld) {
  MemoryMeter m;
  int a = 0, b = 0, c = 0;  // three distinct addresses
  m.allocated(&a, 100);
  m.allocated(&b, 50);
  EXPECT_EQ(m.in_use(), 150u);
  m.released(&a);
  m.allocated(&c, 70);
  EXPECT_EQ(m.in_use(), 120u);
  EXPECT_EQ(m.peak(), 150u);  // 100 + 50 before a went
  m.allocated(&a, 200);
  EXPECT_EQ(m.in_use(), 320u);
  EXPECT_EQ(m.peak(), 320u);
}

TEST(MemoryMeter, ResetPeakStartsFromWhatIsHeld) {
  MemoryMeter m;
  int a = 0, b = 0;
  m.allocated(&a, 1000);
  m.allocated(&b, 10);
  m.released(&a);
  EXPECT_EQ(m.peak(), 1010u);
  m.reset_peak();
  EXPECT_EQ(m.peak(), 10u);
  m.allocated(&a, 5);
  EXPECT_EQ(m.peak(), 15u);
}

TEST(MemoryMeter, UnknownAndNullPointersChangeNothing) {
  MemoryMeter m;
  int a = 0, stranger = 0;
  m.allocated(&a, 64);
  m.released(&stranger);
  m.released(nullptr);
  m.allocated(nullptr, 1 << 20);  // a failed allocation holds nothing
  EXPECT_EQ(m.in_use(), 64u);
  EXPECT_EQ(m.peak(), 64u);
  m.released(&a);
  m.released(&a);  // twice: the second is unknown by then
  EXPECT_EQ(m.in_use(), 0u);
}

TEST(MemoryMeter, AnAddressReusedWithoutAReleaseIsCountedOnce) {
  MemoryMeter m;
  int a = 0;
  m.allocated(&a, 100);
  m.allocated(&a, 30);  // the allocator handed it out again: the first entry was stale
  EXPECT_EQ(m.in_use(), 30u);
  EXPECT_EQ(m.peak(), 100u);
}

TEST(MemoryMeter, ThreadsAllocatingAtOnceLoseNoBytes) {
  MemoryMeter m;
  constexpr int kThreads = 4, kEach = 1000;
  std::vector<std::vector<char>> slots(kThreads, std::vector<char>(kEach));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; i++) m.allocated(&slots[size_t(t)][size_t(i)], 3);
      for (int i = 0; i < kEach; i += 2) m.released(&slots[size_t(t)][size_t(i)]);
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(m.in_use(), size_t(kThreads) * (kEach / 2) * 3);
  EXPECT_GE(m.peak(), m.in_use());
  EXPECT_LE(m.peak(), size_t(kThreads) * kEach * 3);
}

}  // namespace
}  // namespace azr::kernels
