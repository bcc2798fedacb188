// The trainer's metrics sinks. Truths: CRC-32C against RFC 3720 test vectors; event files read
// back by an independent reader (tests/trainer/read_tfevents.py: its own CRC, google.protobuf
// decoding); metrics.jsonl parsed by nlohmann; the console view's text under a fake clock.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"
#include "trainer/console_view.h"
#include "trainer/metrics.h"

namespace fs = std::filesystem;
using azr::trainer::ConsoleView;
using azr::trainer::Scalars;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "azr_metrics_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  std::string l;
  while (std::getline(in, l)) v.push_back(l);
  return v;
}

// ---------------------------------------------------------------------------------- CRC-32C

TEST(MetricsCrc32c, Rfc3720TestVectors) {
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<unsigned char>(i), dec[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(azr::trainer::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(azr::trainer::crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(azr::trainer::crc32c(inc.data(), inc.size()), 0x46DD794Eu);
  EXPECT_EQ(azr::trainer::crc32c(dec.data(), dec.size()), 0x113FDB5Cu);
  EXPECT_EQ(azr::trainer::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(azr::trainer::crc32c("", 0), 0u);
}

TEST(MetricsCrc32c, ContinuesAcrossChunks) {
  std::string s = "The quick brown fox jumps over the lazy dog";
  uint32_t whole = azr::trainer::crc32c(s.data(), s.size());
  uint32_t part = azr::trainer::crc32c(s.data(), 10);
  EXPECT_EQ(azr::trainer::crc32c(s.data() + 10, s.size() - 10, part), whole);
}

TEST(MetricsCrc32c, MaskIsRotatePlusConstant) {
  uint32_t crc = 0xE3069283u;  // crc32c("123456789")
  uint32_t expect = ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
  EXPECT_EQ(azr::trainer::masked_crc32c("123456789", 9), expect);
}

// ---------------------------------------------------------------------- TensorBoard event files

struct ReaderRun {
  int exit_code = -1;
  nlohmann::json records;
  std::string err;
};

std::string python_with_protobuf() {
  for (std::string py : {std::string("/usr/bin/python3"), std::string(std::getenv("AZR_PYTHON") ? std::getenv("AZR_PYTHON") : "")}) {
    if (py.empty() || ::access(py.c_str(), X_OK) != 0) continue;
    if (azr::testing::run_process({py, "-c", "import google.protobuf"}).exit_code == 0) return py;
  }
  return "";
}

ReaderRun read_events(const std::string& python, const std::string& path) {
  std::string script = azr::testing::env_or_fail("AZR_TESTS_DIR") + "/trainer/read_tfevents.py";
  auto r = azr::testing::run_process({python, script, path});
  ReaderRun out{r.exit_code, nullptr, r.err};
  if (r.exit_code == 0) out.records = nlohmann::json::parse(r.out);
  return out;
}

// The reader prints non-finite floats as strings; everything else compares as the float the
// event holds.
void expect_float_value(const nlohmann::json& got, double written, const std::string& tag) {
  float f = static_cast<float>(written);
  if (std::isnan(f)) {
    EXPECT_EQ(got, "nan") << tag;
  } else if (std::isinf(f)) {
    EXPECT_EQ(got, f > 0 ? "inf" : "-inf") << tag;
  } else {
    ASSERT_TRUE(got.is_number()) << tag << ": " << got;
    EXPECT_EQ(got.get<double>(), static_cast<double>(f)) << tag;
  }
}

class MetricsTensorBoard : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = python_with_protobuf();
    if (python_.empty()) GTEST_SKIP() << "no python3 with google.protobuf (apt install python3-protobuf)";
  }
  std::string python_;
  TempDir dir_;
};

// A resumed run's event file starts with SessionLog START at its first step (event.proto:
// Event.session_log = 7, SessionLog.status = 1, START = 1), the record by which TensorBoard drops
// an earlier file's points from that step on: without it a resume showed its repeated steps twice.
TEST_F(MetricsTensorBoard, RestartRecordIsASessionStartAtTheStep) {
  std::string path;
  {
    azr::trainer::TensorBoardSink sink(dir_.path.string());
    path = sink.path();
    sink.restart_at(4);
    sink.write(4, 1.7e9, {{"loss", 0.5}});
  }
  auto r = read_events(python_, path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.records.size(), 3u) << r.records.dump();
  EXPECT_EQ(r.records[1]["session_log"], 1);
  EXPECT_EQ(r.records[1]["step"], 4);
  EXPECT_FALSE(r.records[1].contains("values"));
  EXPECT_EQ(r.records[2]["step"], 4);
}

TEST_F(MetricsTensorBoard, IndependentReaderDecodesEveryStep) {
  std::vector<std::pair<int64_t, Scalars>> steps = {
      {1, {{"reward/deduction/proposer/mean", 0.25}, {"solver/accuracy/abduction", 0.1}, {"time/generate_s", 12.5}}},
      {2, {{"reward/deduction/proposer/mean", -1.0}, {"perf/tokens_per_s", 123456.789}, {"nan/metric", kNaN}}},
      {3, {{"inf/pos", kInf}, {"inf/neg", -kInf}, {"tiny", 1e-30}, {"ünïcode/tag", 3.0}}},
      {int64_t{1} << 40, {{"big_step", 1.0}}},
      {5, {}},
  };
  std::string path;
  double t0 = 1.7e9 + 0.123456;
  {
    azr::trainer::TensorBoardSink sink(dir_.path.string());
    path = sink.path();
    for (size_t i = 0; i < steps.size(); ++i) sink.write(steps[i].first, t0 + static_cast<double>(i), steps[i].second);
  }
  auto r = read_events(python_, path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.records.size(), steps.size() + 1) << r.records.dump();

  const auto& head = r.records[0];
  EXPECT_EQ(head["file_version"], "brain.Event:2");
  EXPECT_EQ(head["step"], 0);
  EXPECT_NEAR(head["wall_time"].get<double>(), static_cast<double>(::time(nullptr)), 60.0);
  EXPECT_FALSE(head.contains("values"));

  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& rec = r.records[i + 1];
    SCOPED_TRACE("step " + std::to_string(steps[i].first));
    EXPECT_EQ(rec["step"].get<int64_t>(), steps[i].first);
    EXPECT_EQ(rec["wall_time"].get<double>(), t0 + static_cast<double>(i));  // a double survives exactly
    EXPECT_FALSE(rec.contains("file_version"));
    std::vector<std::string> tags;
    for (const auto& [tag, v] : steps[i].second) {
      tags.push_back(tag);
      ASSERT_TRUE(rec["values"].contains(tag)) << tag;
      expect_float_value(rec["values"][tag], v, tag);
    }
    if (!steps[i].second.empty()) {
      EXPECT_EQ(rec["tags"].get<std::vector<std::string>>(), tags);
    }
  }
}

TEST_F(MetricsTensorBoard, FileNameAndFlushAfterEachStep) {
  azr::trainer::TensorBoardSink sink(dir_.path.string());
  fs::path p(sink.path());
  EXPECT_EQ(p.parent_path(), dir_.path);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::smatch m;
  std::string name = p.filename().string();
  ASSERT_TRUE(std::regex_match(name, m, std::regex(R"(events\.out\.tfevents\.(\d+)\.(.+)\.(\d+)\.(\d+))"))) << name;
  EXPECT_NEAR(std::stod(m[1].str()), static_cast<double>(::time(nullptr)), 60.0);
  EXPECT_EQ(m[2].str(), host);
  EXPECT_EQ(m[3].str(), std::to_string(::getpid()));

  // Read while the sink is still open: TensorBoard tails live runs.
  auto r = read_events(python_, sink.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.records.size(), 1u);
  sink.write(7, 1.7e9, {{"a", 1.5}});
  r = read_events(python_, sink.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[1]["values"]["a"], 1.5);
}

TEST_F(MetricsTensorBoard, TwoSinksInOneDirectoryGetTwoFiles) {
  azr::trainer::TensorBoardSink a(dir_.path.string()), b(dir_.path.string());
  EXPECT_NE(a.path(), b.path());
  EXPECT_TRUE(fs::exists(a.path()));
  EXPECT_TRUE(fs::exists(b.path()));
}

// The comparison above is only worth something if the reader really checks the framing.
TEST_F(MetricsTensorBoard, ReaderRejectsCorruptedFiles) {
  std::string path;
  {
    azr::trainer::TensorBoardSink sink(dir_.path.string());
    path = sink.path();
    sink.write(1, 1.7e9, {{"loss", 0.5}});
  }
  const std::string good = read_file(path);
  ASSERT_EQ(read_events(python_, path).exit_code, 0);

  std::string bad = good;
  bad[bad.size() - 6] ^= 0x01;  // inside the last record's data
  write_file(path, bad);
  EXPECT_EQ(read_events(python_, path).exit_code, 1);

  bad = good;
  bad[9] ^= 0x01;  // the first record's length CRC
  write_file(path, bad);
  EXPECT_EQ(read_events(python_, path).exit_code, 1);

  write_file(path, good.substr(0, good.size() - 2));  // torn last record
  EXPECT_EQ(read_events(python_, path).exit_code, 1);
}

TEST(MetricsTfRecord, FramingLayout) {
  std::string data = "hello event";
  std::string rec = azr::trainer::tfrecord(data);
  ASSERT_EQ(rec.size(), 8 + 4 + data.size() + 4);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(rec[i]);
  EXPECT_EQ(len, data.size());
  auto u32_at = [&](size_t off) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(rec[off + i]);
    return v;
  };
  EXPECT_EQ(u32_at(8), azr::trainer::masked_crc32c(rec.data(), 8));
  EXPECT_EQ(rec.substr(12, data.size()), data);
  EXPECT_EQ(u32_at(12 + data.size()), azr::trainer::masked_crc32c(data.data(), data.size()));
}

// ------------------------------------------------------------------------------------ JSONL

TEST(MetricsJsonl, OneObjectPerStepInKeyOrderWithNullForNonFinite) {
  TempDir dir;
  fs::path p = dir.path / "metrics.jsonl";
  {
    azr::trainer::JsonlSink sink(p.string());
    sink.write(1, 1700000000.25, {{"z/last_alpha_first", 1.0}, {"a/b", 0.1}, {"m", kNaN}, {"inf", kInf}, {"ninf", -kInf}});
    sink.write(2, 1700000010.5, {{"a/b", 1e-300}, {"count", 42}});
  }
  std::string text = read_file(p);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  auto lines = lines_of(text);
  ASSERT_EQ(lines.size(), 2u);

  auto j1 = nlohmann::ordered_json::parse(lines[0]);
  std::vector<std::string> keys;
  for (auto it = j1.begin(); it != j1.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"step", "time", "z/last_alpha_first", "a/b", "m", "inf", "ninf"}));
  EXPECT_EQ(j1["step"], 1);
  EXPECT_EQ(j1["time"].get<double>(), 1700000000.25);
  EXPECT_EQ(j1["a/b"].get<double>(), 0.1);
  EXPECT_TRUE(j1["m"].is_null());
  EXPECT_TRUE(j1["inf"].is_null());
  EXPECT_TRUE(j1["ninf"].is_null());

  auto j2 = nlohmann::ordered_json::parse(lines[1]);
  EXPECT_EQ(j2["step"], 2);
  EXPECT_EQ(j2["a/b"].get<double>(), 1e-300);  // doubles round-trip exactly
  EXPECT_EQ(j2["count"].get<double>(), 42.0);
}

TEST(MetricsJsonl, ReservedNamesAreRejected) {
  TempDir dir;
  azr::trainer::JsonlSink sink((dir.path / "m.jsonl").string());
  EXPECT_THROW(sink.write(1, 0, {{"step", 1.0}}), std::invalid_argument);
  EXPECT_THROW(sink.write(1, 0, {{"time", 1.0}}), std::invalid_argument);
  EXPECT_EQ(read_file(dir.path / "m.jsonl"), "");
}

TEST(MetricsJsonl, UnopenableFileIsAClearError) {
  try {
    azr::trainer::JsonlSink sink("/nonexistent-dir/metrics.jsonl");
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/metrics.jsonl"), std::string::npos) << e.what();
  }
}

TEST(MetricsJsonl, ReopeningAppendsAndStartsAfterATornLine) {
  TempDir dir;
  fs::path p = dir.path / "metrics.jsonl";
  write_file(p, "{\"step\": 1, \"time\": 1.0}\n{\"step\": 2, \"ti");
  {
    azr::trainer::JsonlSink sink(p.string());
    sink.write(3, 3.0, {{"x", 1.0}});
  }
  auto lines = lines_of(read_file(p));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["step"], 1);
  EXPECT_FALSE(nlohmann::json::accept(lines[1]));
  EXPECT_EQ(nlohmann::json::parse(lines[2])["step"], 3);
}

// A writer killed at an arbitrary moment: nothing sits in a user-space buffer, so every step
// written before the kill is in the file as a whole line. SIGKILL can still cut the write() in
// progress (the kernel stops between pages), leaving one torn last line, which
// truncate_metrics_jsonl then removes.
TEST(MetricsJsonl, KilledWriterLeavesWholeLinesAndATornTailThatTruncationRemoves) {
  TempDir dir;
  fs::path p = dir.path / "metrics.jsonl";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      azr::trainer::JsonlSink sink(p.string());
      Scalars s;
      for (int k = 0; k < 200; ++k) s.emplace_back("some/fairly/long/metric/name/" + std::to_string(k), k * 0.37);
      for (int64_t step = 1;; ++step) {
        sink.write(step, 1.0, s);
        // Step 100 is reported only after its write() returned: it must survive the kill.
        if (step == 100 && ::write(ready[1], "x", 1) != 1) ::_exit(1);
      }
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);

  std::string text = read_file(p);
  auto lines = lines_of(text);
  bool torn_tail = !text.empty() && text.back() != '\n';
  size_t whole = lines.size() - (torn_tail ? 1 : 0);
  ASSERT_GE(whole, 100u);
  for (size_t i = 0; i < whole; ++i) {
    auto j = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(j["step"], static_cast<int64_t>(i + 1));
  }
  if (torn_tail) {
    EXPECT_FALSE(nlohmann::json::accept(lines.back()));
  }

  azr::trainer::truncate_metrics_jsonl(p.string(), 1'000'000'000);
  text = read_file(p);
  EXPECT_EQ(lines_of(text).size(), whole);
  EXPECT_EQ(text.back(), '\n');
}

TEST(MetricsJsonlTruncate, KeepsStepsUpToMaxAndDropsTornAndGarbageLines) {
  TempDir dir;
  fs::path p = dir.path / "metrics.jsonl";
  write_file(p,
             "{\"step\": 1, \"time\": 1.0, \"a\": 0.5}\n"
             "not json at all\n"
             "{\"step\": 2, \"time\": 2.0, \"a\": null}\n"
             "{\"step\": \"3\", \"time\": 3.0}\n"
             "[1, 2]\n"
             "\n"
             "{\"step\": 3, \"time\": 3.0}\n"
             "{\"step\": 4, \"time\": 4.0}\n"
             "{\"step\": 5, \"time\": 5.0, \"a\": 0.");
  auto cut = azr::trainer::truncate_metrics_jsonl(p.string(), 10);
  EXPECT_EQ(read_file(p),
            "{\"step\": 1, \"time\": 1.0, \"a\": 0.5}\n"
            "{\"step\": 2, \"time\": 2.0, \"a\": null}\n"
            "{\"step\": 3, \"time\": 3.0}\n"
            "{\"step\": 4, \"time\": 4.0}\n");
  // Lines 2, 4 and 5 are not metrics; the empty line 6 is nothing; the last is a torn tail.
  EXPECT_EQ(cut.unreadable, 3);
  EXPECT_EQ(cut.first_unreadable_line, 2);
  EXPECT_TRUE(cut.torn_tail);
  EXPECT_EQ(cut.steps_after, 0);
  cut = azr::trainer::truncate_metrics_jsonl(p.string(), 2);
  EXPECT_EQ(read_file(p),
            "{\"step\": 1, \"time\": 1.0, \"a\": 0.5}\n"
            "{\"step\": 2, \"time\": 2.0, \"a\": null}\n");
  EXPECT_EQ(cut.unreadable, 0);
  EXPECT_FALSE(cut.torn_tail);
  EXPECT_EQ(cut.steps_after, 2);
  azr::trainer::truncate_metrics_jsonl(p.string(), 0);
  EXPECT_EQ(read_file(p), "");
}

TEST(MetricsJsonlTruncate, ResumeThenAppendGivesOneLinePerStep) {
  TempDir dir;
  fs::path p = dir.path / "metrics.jsonl";
  {
    azr::trainer::JsonlSink sink(p.string());
    for (int64_t s = 1; s <= 5; ++s) sink.write(s, static_cast<double>(s), {{"x", s * 1.0}});
  }
  {
    std::ofstream torn(p, std::ios::app);
    torn << "{\"step\": 6, \"time\"";
  }
  auto cut = azr::trainer::truncate_metrics_jsonl(p.string(), 3);  // resume from checkpoint 3
  // A crash's torn last line is expected debris, not an unreadable line to warn of.
  EXPECT_TRUE(cut.torn_tail);
  EXPECT_EQ(cut.unreadable, 0);
  EXPECT_EQ(cut.steps_after, 2);
  {
    azr::trainer::JsonlSink sink(p.string());
    for (int64_t s = 4; s <= 6; ++s) sink.write(s, static_cast<double>(s), {{"x", s * 10.0}});
  }
  auto lines = lines_of(read_file(p));
  ASSERT_EQ(lines.size(), 6u);
  for (int64_t i = 0; i < 6; ++i) {
    auto j = nlohmann::json::parse(lines[static_cast<size_t>(i)]);
    EXPECT_EQ(j["step"], i + 1);
    EXPECT_EQ(j["x"].get<double>(), i < 3 ? (i + 1) * 1.0 : (i + 1) * 10.0);
  }
}

// Atomic replacement: the file is swapped by rename, never rewritten in place, so a reader (or
// a crash) sees the old contents or the new ones. A handle opened before still sees the old
// file, the path gets a new inode, and no temporary file is left behind.
TEST(MetricsJsonlTruncate, ReplacesTheFileAtomically) {
  TempDir dir;
  fs::path p = dir.path / "metrics.jsonl";
  const std::string before = "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n";
  write_file(p, before);
  struct stat st_before {};
  ASSERT_EQ(::stat(p.c_str(), &st_before), 0);
  int old_fd = ::open(p.c_str(), O_RDONLY);
  ASSERT_GE(old_fd, 0);

  azr::trainer::truncate_metrics_jsonl(p.string(), 1);

  struct stat st_after {};
  ASSERT_EQ(::stat(p.c_str(), &st_after), 0);
  EXPECT_NE(st_before.st_ino, st_after.st_ino);
  char buf[256];
  ssize_t n = ::pread(old_fd, buf, sizeof buf, 0);
  ::close(old_fd);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))), before);
  EXPECT_EQ(read_file(p), "{\"step\": 1}\n");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"metrics.jsonl"});
}

// A resume killed between writing its copy and the rename left metrics.jsonl.tmp.<pid>, which
// stayed for good: the next truncation removes any such copy (other files are the user's).
TEST(MetricsJsonlTruncate, RemovesTheCopyOfAKilledTruncation) {
  TempDir dir;
  fs::path p = dir.path / "metrics.jsonl";
  write_file(p, "{\"step\": 1}\n{\"step\": 2}\n");
  write_file(dir.path / "metrics.jsonl.tmp.424242", "{\"step\": 1}\n");
  write_file(dir.path / "notes.tmp.1", "mine\n");
  azr::trainer::truncate_metrics_jsonl(p.string(), 1);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"metrics.jsonl", "notes.tmp.1"}));
  EXPECT_EQ(read_file(p), "{\"step\": 1}\n");
}

TEST(MetricsJsonlTruncate, MissingFileIsNothingToDo) {
  TempDir dir;
  fs::path p = dir.path / "metrics.jsonl";
  EXPECT_NO_THROW(azr::trainer::truncate_metrics_jsonl(p.string(), 5));
  EXPECT_FALSE(fs::exists(p));
}

// ---------------------------------------------------------------------------------- console

struct FakeClock {
  double t = 0;
  std::function<double()> fn() {
    return [this] { return t; };
  }
};

struct Capture {
  std::FILE* f = std::tmpfile();
  ~Capture() {
    if (f) std::fclose(f);
  }
  std::string text() {
    std::fflush(f);
    long end = std::ftell(f);
    std::string s(static_cast<size_t>(end), '\0');
    std::rewind(f);
    size_t got = std::fread(s.data(), 1, s.size(), f);
    s.resize(got);
    std::fseek(f, 0, SEEK_END);
    return s;
  }
};

const std::vector<std::pair<std::string, std::string>> kHighlights = {{"valid", "proposer/valid_rate"},
                                                                       {"solve", "solver/accuracy"}};

Scalars step_scalars() {
  return {{"proposer/valid_rate", 0.42},
          {"solver/accuracy/abduction", 0.2},
          {"solver/accuracy/deduction", 0.42},
          {"time/generate_s", 9.0},
          {"perf/tokens_per_s", 1234.0}};
}

// What the progress line shows after its last carriage return.
std::string last_progress_line(const std::string& out) {
  auto cr = out.rfind('\r');
  return cr == std::string::npos ? out : out.substr(cr + 1);
}

TEST(MetricsConsoleView, ResolveMode) {
  EXPECT_EQ(ConsoleView::resolve("progress", 2), ConsoleView::Mode::Progress);
  EXPECT_EQ(ConsoleView::resolve("plain", 2), ConsoleView::Mode::Plain);
  EXPECT_EQ(ConsoleView::resolve("off", 2), ConsoleView::Mode::Off);
  EXPECT_THROW(ConsoleView::resolve("fancy", 2), std::invalid_argument);

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_EQ(ConsoleView::resolve("auto", fds[1]), ConsoleView::Mode::Plain);
  ::close(fds[0]);
  ::close(fds[1]);

  int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
    if (master >= 0) ::close(master);
    GTEST_SKIP() << "no pseudo-terminal to check auto -> progress";
  }
  int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  EXPECT_EQ(ConsoleView::resolve("auto", slave), ConsoleView::Mode::Progress);
  ::close(slave);
  ::close(master);
}

TEST(MetricsConsoleView, PlainPrintsOneLinePerStepWithEta) {
  FakeClock clock;
  Capture cap;
  ConsoleView view(1, 10, ConsoleView::Mode::Plain, cap.f, clock.fn());
  view.phase("generating solver rollouts");  // progress mode only
  clock.t = 10;
  view.step_done(1, step_scalars(), kHighlights);
  clock.t = 20;
  view.step_done(2, step_scalars(), kHighlights);
  view.message("checkpoint saved to run/checkpoints/step-2");
  view.finish("done: 2 steps");
  EXPECT_EQ(cap.text(),
            "step 1/10 elapsed 10s ETA 1m30s | valid 0.42 solve 0.31 | 1.2k tok/s\n"
            "step 2/10 elapsed 20s ETA 1m20s | valid 0.42 solve 0.31 | 1.2k tok/s\n"
            "checkpoint saved to run/checkpoints/step-2\n"
            "done: 2 steps\n");
}

TEST(MetricsConsoleView, ProgressRedrawsOneLine) {
  FakeClock clock;
  Capture cap;
  ConsoleView view(1, 10, ConsoleView::Mode::Progress, cap.f, clock.fn(), 200);
  clock.t = 10;
  view.step_done(1, step_scalars(), kHighlights);
  clock.t = 20;
  view.step_done(2, step_scalars(), kHighlights);
  std::string out = cap.text();
  EXPECT_EQ(out.find('\n'), std::string::npos) << out;
  EXPECT_EQ(last_progress_line(out),
            "step 2/10 [####................] 20% ETA 1m20s | valid 0.42 solve 0.31 | 1.2k tok/s\033[K");

  view.phase("generating solver rollouts");
  EXPECT_EQ(last_progress_line(cap.text()),
            "step 2/10 [####................] 20% ETA 1m20s | valid 0.42 solve 0.31 | 1.2k tok/s"
            " | generating solver rollouts\033[K");
}

TEST(MetricsConsoleView, ProgressBeforeTheFirstStepHasNoEta) {
  FakeClock clock;
  Capture cap;
  ConsoleView view(1, 50, ConsoleView::Mode::Progress, cap.f, clock.fn(), 200);
  view.phase("proposing tasks");
  EXPECT_EQ(cap.text(), "\rstep 0/50 [....................] 0% ETA ? | proposing tasks\033[K");
}

TEST(MetricsConsoleView, MessageGoesAboveTheProgressLine) {
  FakeClock clock;
  Capture cap;
  ConsoleView view(1, 4, ConsoleView::Mode::Progress, cap.f, clock.fn(), 200);
  clock.t = 5;
  view.step_done(1, {}, {{"loss", "train/loss"}});
  const std::string line = "step 1/4 [#####...............] 25% ETA 15s | loss -\033[K";
  EXPECT_EQ(cap.text(), "\r" + line);
  view.message("checkpoint saved");
  EXPECT_EQ(cap.text(), "\r" + line + "\r\033[Kcheckpoint saved\n\r" + line);
  view.finish("summary line 1\nsummary line 2\n");
  EXPECT_EQ(cap.text(), "\r" + line + "\r\033[Kcheckpoint saved\n\r" + line + "\r" + line +
                            "\nsummary line 1\nsummary line 2\n");
}

TEST(MetricsConsoleView, ProgressLineIsClippedToTheWidth) {
  FakeClock clock;
  Capture cap;
  ConsoleView view(1, 10, ConsoleView::Mode::Progress, cap.f, clock.fn(), 40);
  clock.t = 10;
  view.step_done(1, step_scalars(), kHighlights);
  std::string line = last_progress_line(cap.text());
  // One column is left free so the terminal never wraps.
  EXPECT_EQ(line, "step 1/10 [##..................] 10% ET\033[K");
  EXPECT_EQ(line.size() - 3, 39u);
}

TEST(MetricsConsoleView, NonTerminalWidthDefaultsTo100) {
  FakeClock clock;
  Capture cap;
  ConsoleView view(1, 10, ConsoleView::Mode::Progress, cap.f, clock.fn());
  clock.t = 1;
  view.step_done(1, step_scalars(), kHighlights);
  view.phase(std::string(300, 'x'));
  EXPECT_EQ(last_progress_line(cap.text()).size(), 99u + 3u);
}

TEST(MetricsConsoleView, EtaCountsOnlyStepsTimedInThisProcess) {
  FakeClock clock;
  clock.t = 1000;
  Capture cap;
  ConsoleView view(41, 50, ConsoleView::Mode::Plain, cap.f, clock.fn());  // resumed at checkpoint 40
  clock.t = 1030;
  view.step_done(41, {}, {});
  EXPECT_EQ(cap.text(), "step 41/50 elapsed 30s ETA 4m30s\n");
}

TEST(MetricsConsoleView, OffWritesNothing) {
  FakeClock clock;
  Capture cap;
  ConsoleView view(1, 10, ConsoleView::Mode::Off, cap.f, clock.fn());
  view.phase("x");
  view.step_done(1, step_scalars(), kHighlights);
  view.message("m");
  view.finish("s");
  EXPECT_EQ(cap.text(), "");
}

TEST(MetricsConsoleFormat, Durations) {
  EXPECT_EQ(azr::trainer::format_duration(0), "0s");
  EXPECT_EQ(azr::trainer::format_duration(59.4), "59s");
  EXPECT_EQ(azr::trainer::format_duration(80), "1m20s");
  EXPECT_EQ(azr::trainer::format_duration(192), "3m12s");
  EXPECT_EQ(azr::trainer::format_duration(2 * 3600 + 5 * 60 + 7), "2h05m");
  EXPECT_EQ(azr::trainer::format_duration(3 * 86400 + 4 * 3600), "3d04h");
  EXPECT_EQ(azr::trainer::format_duration(-1), "?");
  EXPECT_EQ(azr::trainer::format_duration(kNaN), "?");
}

TEST(MetricsConsoleFormat, CompactNumbers) {
  EXPECT_EQ(azr::trainer::format_compact(0.4219), "0.42");
  EXPECT_EQ(azr::trainer::format_compact(-12.5), "-12.50");
  EXPECT_EQ(azr::trainer::format_compact(345.4), "345");
  EXPECT_EQ(azr::trainer::format_compact(1234), "1.2k");
  EXPECT_EQ(azr::trainer::format_compact(3.45e6), "3.5M");
  EXPECT_EQ(azr::trainer::format_compact(kNaN), "nan");
}

}  // namespace
