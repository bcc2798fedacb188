// `azr buffer` as a user runs it: the real binary on real database files.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "buffer/task_buffer.h"
#include "tests/test_support.h"

namespace {

namespace fs = std::filesystem;
using azr::testing::run_process;
using azr::testing::json_lines;
using nlohmann::json;

std::string azr() { return azr::testing::env_or_fail("AZR_BIN"); }

class BufferCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("azr_buffer_cli_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // CRUXEval as task lines in the canonical (compact, ordered) form.
  std::string cruxeval_tasks() const {
    std::ifstream in(azr::testing::env_or_fail("AZR_SHARED_DIR") + "/benchmarks/cruxeval/cruxeval.jsonl");
    std::string line, out;
    while (std::getline(in, line)) {
      auto j = json::parse(line);
      nlohmann::ordered_json t;
      t["type"] = "deduction";
      t["program"] = j["code"];
      t["input"] = j["input"];
      t["output"] = j["output"];
      out += t.dump() + "\n";
    }
    return out;
  }
  int64_t total(const std::string& db) {
    auto r = run_process({azr(), "buffer", "stats", db, "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto j = json::parse(r.out);
    return j["types"]["deduction"]["total"].get<int64_t>() + j["types"]["abduction"]["total"].get<int64_t>() +
           j["types"]["induction"]["total"].get<int64_t>();
  }
  fs::path dir_;
};

TEST_F(BufferCli, CruxEvalRoundTripsExactly) {
  std::string tasks = cruxeval_tasks();
  std::string file = write("crux.jsonl", tasks), db = path("b.db");
  auto imp = run_process({azr(), "buffer", "import", db, file, "--json"});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  EXPECT_EQ(json::parse(imp.out)["imported"], 800);

  auto exp = run_process({azr(), "buffer", "export", db, "--core"});
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  EXPECT_EQ(exp.out, tasks);  // byte for byte

  auto stats = json::parse(run_process({azr(), "buffer", "stats", db, "--json"}).out);
  EXPECT_EQ(stats["types"]["deduction"]["total"], 800);
  EXPECT_EQ(stats["types"]["deduction"]["by_origin"]["imported"], 800);
  EXPECT_EQ(stats["types"]["abduction"]["total"], 0);

  auto originals = json_lines(tasks);
  auto listed = json_lines(run_process({azr(), "buffer", "list", db, "--json", "--limit", "0"}).out);
  ASSERT_EQ(listed.size(), 800u);
  for (size_t i = 0; i < listed.size(); ++i) {
    EXPECT_EQ(listed[i]["program"], originals[i]["program"]);
    EXPECT_EQ(listed[i]["output"], originals[i]["output"]);
  }
  for (int id : {1, 400, 800}) {
    auto shown = json::parse(run_process({azr(), "buffer", "show", db, std::to_string(id), "--json"}).out);
    EXPECT_EQ(shown["id"], id);
    EXPECT_EQ(shown["input"], originals[static_cast<size_t>(id - 1)]["input"]);
  }
  // Importing the same file again adds nothing: every task is a duplicate.
  auto again = json::parse(run_process({azr(), "buffer", "import", db, file, "--json"}).out);
  EXPECT_EQ(again["imported"], 0);
  EXPECT_EQ(again["duplicates"], 800);
}

// Fields the format does not have are ignored (a user's annotations) and said, with the lines that
// had each: a typo of an optional field ("stpe" for "step") went without a word. A full export,
// every field of which is the format's, says nothing.
TEST_F(BufferCli, AnImportSaysWhichFieldsItIgnored) {
  const std::string task = R"("type": "deduction", "program": "def f(x):\n    return x", "output": "1")";
  const std::string file = write("annotated.jsonl", "{" + task + R"(, "input": "1", "stpe": 3, "note": "a"})" "\n" +
                                                         "{" + task + R"(, "input": "2", "note": "b"})" "\n");
  const std::string db = path("annotated.db");
  auto imp = run_process({azr(), "buffer", "import", db, file});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  EXPECT_EQ(imp.err, "ignored field(s) that are not in the task format: \"note\" (2 lines), \"stpe\" (1 line)\n");
  EXPECT_NE(imp.out.find("imported 2 task(s)"), std::string::npos) << imp.out;

  // By the line's type: a deduction's "message" is an induction's field, not a deduction's. The
  // first 20 names are listed, each as a JSON string (a key may hold a newline); the rest counted.
  std::string many = "{" + task + R"(, "input": "99", "a\nb": 1})" "\n";
  many += "{" + task + R"(, "input": "3", "message": "m"})" "\n";
  for (int i = 10; i < 32; ++i)  // k10 to k27 fill the 20 names; k28 to k31 are counted
    many += "{" + task + R"(, "input": ")" + std::to_string(i) + R"(", "k)" + std::to_string(i) +
            R"(": 1})" "\n";
  auto more = run_process({azr(), "buffer", "import", path("many.db"), write("many.jsonl", many)});
  ASSERT_EQ(more.exit_code, 0) << more.err;
  EXPECT_EQ(more.err, "ignored field(s) that are not in the task format: \"a\\nb\" (1 line), \"k10\" (1 line), "
                      "\"k11\" (1 line), \"k12\" (1 line), \"k13\" (1 line), \"k14\" (1 line), \"k15\" (1 line), "
                      "\"k16\" (1 line), \"k17\" (1 line), \"k18\" (1 line), \"k19\" (1 line), \"k20\" (1 line), "
                      "\"k21\" (1 line), \"k22\" (1 line), \"k23\" (1 line), \"k24\" (1 line), \"k25\" (1 line), "
                      "\"k26\" (1 line), \"k27\" (1 line), \"message\" (1 line), and others in 4 line(s)\n");

  const std::string full = write("full.jsonl", run_process({azr(), "buffer", "export", db}).out);
  auto again = run_process({azr(), "buffer", "import", path("again.db"), full});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.err, "");
}

// An import evicts nothing already in the buffer unless asked: the flag's default was 16,384 per
// type, so importing one task into a run's unbounded buffer of 16,390 deductions deleted the 7
// oldest. With --capacity given, it holds for the tasks already there too.
TEST_F(BufferCli, AnImportEvictsOnlyWhenAskedTo) {
  std::string lines;
  for (int i = 0; i < 16390; i++)
    lines += R"({"type": "deduction", "program": "def f(x):\n    return x + )" + std::to_string(i) +
             R"(", "input": "1", "output": ")" + std::to_string(i + 1) + "\"}\n";
  const std::string db = path("big.db");
  auto first = run_process({azr(), "buffer", "import", db, write("many.jsonl", lines), "--json"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(json::parse(first.out)["evicted"], 0);
  const std::string one =
      R"({"type": "deduction", "program": "def f(x):\n    return x * 3", "input": "2", "output": "6"})";
  auto plain = run_process({azr(), "buffer", "import", db, write("one.jsonl", one + "\n"), "--json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(json::parse(plain.out)["evicted"], 0);
  EXPECT_EQ(total(db), 16391);

  // Asked: 16,391 down to 16,000, the oldest first; the new task is among the kept.
  const std::string two =
      R"({"type": "deduction", "program": "def f(x):\n    return x * 4", "input": "2", "output": "8"})";
  auto capped = run_process({azr(), "buffer", "import", db, write("two.jsonl", two + "\n"), "--capacity", "16000",
                             "--json"});
  ASSERT_EQ(capped.exit_code, 0) << capped.err;
  EXPECT_EQ(json::parse(capped.out)["evicted"], 392);
  EXPECT_EQ(total(db), 16000);
  const auto kept = json_lines(run_process({azr(), "buffer", "export", db, "--core"}).out);
  ASSERT_EQ(kept.size(), 16000u);
  EXPECT_EQ(kept.front()["output"], "393");  // tasks 0 to 391 went, oldest first
  EXPECT_EQ(kept.back()["output"], "8");
}

TEST_F(BufferCli, ExportToFileIsAtomicAndComplete) {
  std::string db = path("b.db"), out = path("out.jsonl");
  ASSERT_EQ(run_process({azr(), "buffer", "import", db, write("t.jsonl", cruxeval_tasks())}).exit_code, 0);
  auto r = run_process({azr(), "buffer", "export", db, "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = json_lines(read(out));
  ASSERT_EQ(lines.size(), 800u);
  EXPECT_EQ(lines[0]["origin"], "imported");  // full export carries origin, step and statistics
  EXPECT_TRUE(lines[0].contains("attempts"));
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos);
}

// An export, a listing or stats to a standard output that cannot take them (a full disk) is an
// error: the output was lost and exit 0 said it was whole.
TEST_F(BufferCli, AnOutputThatCannotBeWrittenIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this machine";
  const std::string db = path("b.db");
  ASSERT_EQ(run_process({azr(), "buffer", "import", db, write("t.jsonl", cruxeval_tasks())}).exit_code, 0);
  for (const std::string args : {"export", "list --json", "stats"}) {
    auto r = run_process({"/bin/sh", "-c", "\"$0\" buffer " + args + " \"$1\" > /dev/full", azr(), db});
    EXPECT_EQ(r.exit_code, 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find("cannot write to standard output"), std::string::npos)
        << args << ": " << r.err;
  }
  auto ok = run_process({"/bin/sh", "-c", "\"$0\" buffer stats \"$1\" > /dev/null", azr(), db});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// What an import killed with -9 left (`new.db.tmp-PID` and its -wal and -shm) goes at the next
// import of that name when PID no longer runs; a live process's temporaries stay.
TEST_F(BufferCli, TemporariesOfADeadImportAreRemoved) {
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(dead, &status, 0), dead);  // reaped: no process has this pid now
  const std::string db = path("new.db"), dead_tmp = db + ".tmp-" + std::to_string(dead);
  const std::string live_tmp = db + ".tmp-" + std::to_string(getpid());
  for (const std::string& f : {dead_tmp, dead_tmp + "-wal", dead_tmp + "-shm", live_tmp, db + ".tmp-notapid"})
    std::ofstream(f) << "left behind";
  auto r = run_process({azr(), "buffer", "import", db, write("t.jsonl", cruxeval_tasks())});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(total(db), 800);
  for (const std::string& f : {dead_tmp, dead_tmp + "-wal", dead_tmp + "-shm"}) EXPECT_FALSE(fs::exists(f)) << f;
  EXPECT_TRUE(fs::exists(live_tmp));
  EXPECT_TRUE(fs::exists(db + ".tmp-notapid"));  // not a name azr writes
}

// An import that creates the database and an export to a file publish a synced temporary under
// the final name (link, rename) and then sync the directory: a power cut leaves the old state or
// the whole new file. tests/sync_log.cpp, preloaded, logs the calls in order.
TEST_F(BufferCli, WrittenFilesAreSyncedBeforeTheirNameAndTheDirectoryAfter) {
  const fs::path real_dir = fs::canonical(dir_);  // the log names files as /proc/self/fd resolves them
  const std::string db = (real_dir / "b.db").string(), out = (real_dir / "out.jsonl").string();
  const std::string log = (real_dir / "sync.log").string();
  const azr::testing::ChildEnvironment env({std::string("LD_PRELOAD=") + AZR_SYNC_LOG_LIB, "AZR_SYNC_LOG=" + log});
  const std::string tasks =
      "{\"type\":\"deduction\",\"program\":\"def f(): return 2\",\"input\":\"\",\"output\":\"2\"}\n";
  auto imp = run_process({azr(), "buffer", "import", db, write("t.jsonl", tasks)}, "", env.envp());
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  auto exp = run_process({azr(), "buffer", "export", db, "-o", out}, "", env.envp());
  ASSERT_EQ(exp.exit_code, 0) << exp.err;
  ASSERT_EQ(json_lines(read(out)).size(), 1u);

  std::vector<std::string> calls;
  std::istringstream in(read(log));
  for (std::string l; std::getline(in, l);) calls.push_back(l);
  // The call publishing `target` from its temporary (`verb tmp target`, tmp = target.tmp-<pid>):
  // the temporary is synced before it (SQLite's fdatasync counts: it writes the file's size too),
  // the directory after it.
  auto expect_published = [&](const std::string& verb, const std::string& target) {
    size_t at = calls.size();
    std::string tmp;
    for (size_t i = 0; i < calls.size(); i++)
      if (calls[i].rfind(verb + " " + target + ".tmp-", 0) == 0 && calls[i].size() > target.size() &&
          calls[i].substr(calls[i].size() - target.size() - 1) == " " + target) {
        at = i;
        tmp = calls[i].substr(verb.size() + 1, calls[i].size() - verb.size() - target.size() - 2);
      }
    ASSERT_LT(at, calls.size()) << "no " << verb << " into " << target << " in:\n" << read(log);
    bool synced_before = false, dir_after = false;
    for (size_t i = 0; i < at; i++) synced_before |= calls[i] == "fsync " + tmp || calls[i] == "fdatasync " + tmp;
    for (size_t i = at + 1; i < calls.size(); i++) dir_after |= calls[i] == "fsync " + real_dir.string();
    EXPECT_TRUE(synced_before) << tmp << " not synced before the " << verb << ":\n" << read(log);
    EXPECT_TRUE(dir_after) << real_dir << " not synced after the " << verb << ":\n" << read(log);
  };
  expect_published("link", db);
  expect_published("rename", out);
}

TEST_F(BufferCli, MalformedImportNamesEveryLineAndChangesNothing) {
  std::string db = path("b.db");
  ASSERT_EQ(run_process({azr(), "buffer", "import", db, write("good.jsonl", cruxeval_tasks())}).exit_code, 0);
  std::string before = run_process({azr(), "buffer", "export", db}).out;
  std::string bad =
      std::string("{\"type\":\"deduction\",\"program\":\"def f(): return 2\",\"input\":\"\",\"output\":\"2\"}\n"
      "{oops\n"
      "{\"type\":\"deduction\",\"program\":\"def f(): return 3\",\"input\":\"\"}\n"
      "\n"
      "{\"type\":\"sorting\",\"program\":\"x\",\"input\":\"\",\"output\":\"\"}\n"
      "{\"type\":\"induction\",\"program\":\"def f(x): return x\",\"inputs\":[\"1\"],\"outputs\":[1],"
      "\"message\":\"\"}\n") +
      // A task whose extra field nests past the bound the other JSON Lines readers keep (cli/input.h).
      "{\"type\":\"deduction\",\"program\":\"def f(): return 4\",\"input\":\"\",\"output\":\"4\",\"note\":" +
      std::string(65, '[') + std::string(65, ']') + "}\n";
  auto r = run_process({azr(), "buffer", "import", db, write("bad.jsonl", bad)});
  EXPECT_EQ(r.exit_code, 2);
  for (const char* where : {"bad.jsonl:2:", "bad.jsonl:3: field 'output' is missing", "bad.jsonl:5: field 'type'",
                            "bad.jsonl:6: field 'outputs'[0] must be a string",
                            "bad.jsonl:7: nests deeper than 64 levels"})
    EXPECT_NE(r.err.find(where), std::string::npos) << where << "\n" << r.err;
  EXPECT_EQ(r.err.find("bad.jsonl:1:"), std::string::npos);
  EXPECT_NE(r.err.find("5 invalid line(s); nothing imported (use --skip-invalid to import the valid ones):"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(run_process({azr(), "buffer", "export", db}).out, before);  // nothing half-imported

  auto skip = run_process({azr(), "buffer", "import", db, path("bad.jsonl"), "--skip-invalid", "--json"});
  EXPECT_EQ(skip.exit_code, 0) << skip.err;
  EXPECT_EQ(json::parse(skip.out)["imported"], 1);
  EXPECT_EQ(json::parse(skip.out)["invalid"], 5);
  EXPECT_EQ(total(db), 801);
}

// A binary file given by mistake (a database as the JSONL) has thousands of "lines": each was
// said, with its raw bytes (868 KB of messages for a small database), and each message held in
// memory (7 GB for a 1 GB file). The first 20 are said, the rest counted.
TEST_F(BufferCli, ManyBadLinesAreListedTwentyAndCounted) {
  std::string bad;
  for (int i = 0; i < 25; ++i) bad += "not json " + std::to_string(i) + "\n";
  bad += "{\"type\":\"deduction\",\"program\":\"def f(): return 2\",\"input\":\"\",\"output\":\"2\"}\n";
  const std::string file = write("many-bad.jsonl", bad);
  auto r = run_process({azr(), "buffer", "import", path("m.db"), file});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(file + ": 25 invalid line(s); nothing imported"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(file + ":20: not valid JSON"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(file + ":21:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\n  ... and 5 more"), std::string::npos) << r.err;
  auto skip = run_process({azr(), "buffer", "import", path("m.db"), file, "--skip-invalid", "--json"});
  EXPECT_EQ(skip.exit_code, 0) << skip.err;
  EXPECT_EQ(json::parse(skip.out)["invalid"], 25);
  EXPECT_EQ(json::parse(skip.out)["imported"], 1);
  size_t said = 0;
  const std::string skipped = "skipped " + file;
  for (size_t at = skip.err.find(skipped); at != std::string::npos; at = skip.err.find(skipped, at + 1)) ++said;
  EXPECT_EQ(said, 20u) << skip.err;
  EXPECT_NE(skip.err.find("skipped 5 more invalid line(s)"), std::string::npos) << skip.err;
  // A binary file stops at its first NUL byte: a database is no JSON Lines. With --skip-invalid
  // such lines are bad lines like any other (a file with a zero-filled tail is salvaged).
  const std::string db = path("m.db");
  auto binary = run_process({azr(), "buffer", "import", path("n.db"), db});
  EXPECT_EQ(binary.exit_code, 2);
  EXPECT_EQ(binary.err, "azr: " + db + ":1: a NUL byte: a binary file, not JSON Lines (an SQLite database: `azr "
                        "buffer export DB` writes a buffer's tasks as JSON Lines)\n");
  EXPECT_FALSE(fs::exists(path("n.db")));
  const std::string tail = write("zero-tail.jsonl", std::string(bad.end() - 75, bad.end()) + std::string(64, '\0'));
  auto salvaged = run_process({azr(), "buffer", "import", path("n.db"), tail, "--skip-invalid", "--json"});
  EXPECT_EQ(salvaged.exit_code, 0) << salvaged.err;
  EXPECT_EQ(json::parse(salvaged.out)["imported"], 1) << salvaged.out;
  EXPECT_EQ(json::parse(salvaged.out)["invalid"], 1) << salvaged.out;
}

TEST_F(BufferCli, BadDatabasesGetOneClearMessage) {
  auto missing = run_process({azr(), "buffer", "stats", path("missing.db")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("no such file"), std::string::npos) << missing.err;

  std::string text = write("notes.txt", "these are not the tables you are looking for\n");
  auto notdb = run_process({azr(), "buffer", "list", text});
  EXPECT_EQ(notdb.exit_code, 2);
  EXPECT_NE(notdb.err.find("not an SQLite database"), std::string::npos) << notdb.err;
  EXPECT_EQ(read(text), "these are not the tables you are looking for\n");

  // Another application's SQLite database: refused, and left exactly as it was.
  std::string other = path("other.db");
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(other.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h, "CREATE TABLE notes(x); INSERT INTO notes VALUES (1);", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(h);
  std::string other_bytes = read(other);
  auto imp = run_process({azr(), "buffer", "import", other, write("t.jsonl", cruxeval_tasks())});
  EXPECT_EQ(imp.exit_code, 2);
  EXPECT_NE(imp.err.find("not an azr task buffer"), std::string::npos) << imp.err;
  EXPECT_EQ(read(other), other_bytes);
  // Marked as another program's (an application id, a schema version), even before it has tables.
  for (const char* mark : {"PRAGMA application_id = 1234", "PRAGMA user_version = 7"}) {
    const std::string marked = path("marked.db");
    fs::remove(marked);
    ASSERT_EQ(sqlite3_open(marked.c_str(), &h), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(h, mark, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(h);
    const std::string marked_bytes = read(marked);
    auto r = run_process({azr(), "buffer", "import", marked, path("t.jsonl")});
    EXPECT_EQ(r.exit_code, 2) << mark;
    EXPECT_NE(r.err.find("not an azr task buffer"), std::string::npos) << mark << ": " << r.err;
    EXPECT_EQ(read(marked), marked_bytes) << mark;
  }

  // A buffer from a newer azr: refused, not "migrated" backwards.
  std::string newer = path("newer.db");
  ASSERT_EQ(run_process({azr(), "buffer", "import", newer, path("t.jsonl")}).exit_code, 0);
  ASSERT_EQ(sqlite3_open(newer.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(h);
  for (const char* cmd : {"stats", "list", "export"}) {
    auto r = run_process({azr(), "buffer", cmd, newer});
    EXPECT_EQ(r.exit_code, 2) << cmd;
    EXPECT_NE(r.err.find("newer azr (buffer schema 99"), std::string::npos) << r.err;
  }
  auto show = run_process({azr(), "buffer", "show", path("t.jsonl"), "1"});
  EXPECT_EQ(show.exit_code, 2);

  // A buffer whose tables were altered by hand: each command failed at its first statement on
  // them ("prepare: no such table: tasks", exit 1 or 2), `migrate` said it was fine, and a
  // dropped column read as empty. Refused on open, named, and left as it was.
  const std::vector<std::pair<std::string, std::string>> alterations = {
      {"DROP TABLE tasks", "its table tasks is missing"},
      {"ALTER TABLE tasks DROP COLUMN message", "its table tasks: column 10 is 'step INTEGER', where the schema has "
                                                 "'message TEXT'"},
      {"DROP INDEX tasks_type_fingerprint", "its index tasks_type_fingerprint is missing"}};
  for (const auto& [alteration, said] : alterations) {
    const std::string altered = path("altered.db");
    std::remove(altered.c_str());
    ASSERT_EQ(run_process({azr(), "buffer", "import", altered, path("t.jsonl")}).exit_code, 0);
    ASSERT_EQ(sqlite3_open(altered.c_str(), &h), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(h, alteration.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << alteration;
    sqlite3_close(h);
    const std::string bytes = read(altered);
    for (const std::vector<std::string>& cmd :
         {std::vector<std::string>{"stats"}, {"list"}, {"export"}, {"migrate"}, {"import", path("t.jsonl")}}) {
      std::vector<std::string> args = {azr(), "buffer", cmd[0], altered};
      args.insert(args.end(), cmd.begin() + 1, cmd.end());
      auto r = run_process(args);
      EXPECT_EQ(r.exit_code, 2) << alteration << ": " << cmd[0];
      EXPECT_NE(r.err.find(altered + ": not a whole azr task buffer: " + said), std::string::npos)
          << cmd[0] << ": " << r.err;
    }
    EXPECT_EQ(read(altered), bytes) << alteration;
  }
  // A task row written outside azr: an induction task's inputs that are not a JSON array of
  // strings were exported as [], which import then refused.
  const std::string rows = path("rows.db");
  const std::string induction =
      "{\"type\":\"induction\",\"program\":\"def f(x):\\n    return x\",\"inputs\":[\"1\",\"2\"],"
      "\"outputs\":[\"1\",\"2\"],\"message\":\"m\"}\n";
  ASSERT_EQ(run_process({azr(), "buffer", "import", rows, write("induction.jsonl", induction)}).exit_code, 0);
  ASSERT_EQ(sqlite3_open(rows.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h, "UPDATE tasks SET inputs = '[1, 2]'", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(h);
  for (const char* cmd : {"export", "show"}) {
    std::vector<std::string> args = {azr(), "buffer", cmd, rows};
    if (std::string(cmd) == "show") args.push_back("1");
    auto r = run_process(args);
    EXPECT_EQ(r.exit_code, 2) << cmd;
    EXPECT_EQ(r.out, "") << cmd;
    EXPECT_NE(r.err.find(rows + ": task 1: its inputs column is not a JSON array of strings ([1, 2])"),
              std::string::npos)
        << cmd << ": " << r.err;
  }
}

TEST_F(BufferCli, LockedDatabaseIsReportedAndUnchanged) {
  std::string db = path("b.db");
  ASSERT_EQ(run_process({azr(), "buffer", "import", db, write("t.jsonl", cruxeval_tasks())}).exit_code, 0);
  std::string before = run_process({azr(), "buffer", "export", db}).out;
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);  // another writer
  std::string more = "{\"type\":\"abduction\",\"program\":\"def f(x): return x\",\"input\":\"1\",\"output\":\"1\"}\n";
  auto r = run_process({azr(), "buffer", "import", db, write("more.jsonl", more), "--wait", "0.2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("locked"), std::string::npos) << r.err;
  // Readers are not blocked by the writer (WAL).
  EXPECT_EQ(total(db), 800);
  sqlite3_exec(h, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(h);
  EXPECT_EQ(run_process({azr(), "buffer", "export", db}).out, before);
}

TEST_F(BufferCli, ReadsWorkWhileATrainerWrites) {
  std::string db = path("b.db");
  { azr::buffer::TaskBuffer::open(db, azr::buffer::TaskBuffer::Mode::ReadWrite); }  // schema exists first
  pid_t writer = fork();
  if (writer == 0) {
    auto b = azr::buffer::TaskBuffer::open(db, azr::buffer::TaskBuffer::Mode::ReadWrite);
    for (int batch = 0; batch < 150; ++batch) {
      std::vector<azr::buffer::Task> tasks(64);
      for (int i = 0; i < 64; ++i) {
        tasks[static_cast<size_t>(i)].type = azr::buffer::TaskType::Abduction;
        tasks[static_cast<size_t>(i)].program = "def f(x):\n    return x + " + std::to_string(batch * 64 + i);
        tasks[static_cast<size_t>(i)].input = "1";
        tasks[static_cast<size_t>(i)].output = std::to_string(batch * 64 + i + 1);
        tasks[static_cast<size_t>(i)].step = batch;
      }
      b.insert(tasks);
    }
    _exit(0);
  }
  int64_t last = 0;
  for (int i = 0; i < 15; ++i) {
    auto r = run_process({azr(), "buffer", "stats", db, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    int64_t n = json::parse(r.out)["types"]["abduction"]["total"].get<int64_t>();
    EXPECT_EQ(n % 64, 0) << "a reader saw half a batch";
    EXPECT_GE(n, last);
    last = n;
    auto l = run_process({azr(), "buffer", "list", db, "--type", "abduction", "--sort", "step", "--desc", "--limit", "5"});
    EXPECT_EQ(l.exit_code, 0) << l.err;
  }
  int st = 0;
  waitpid(writer, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  EXPECT_EQ(total(db), 150 * 64);
}

TEST_F(BufferCli, ListFiltersSortsAndPrintsAlignedTables) {
  std::string db = path("b.db");
  {
    auto b = azr::buffer::TaskBuffer::open(db, azr::buffer::TaskBuffer::Mode::ReadWrite);
    std::vector<azr::buffer::Task> tasks(6);
    for (int i = 0; i < 6; ++i) {
      auto& t = tasks[static_cast<size_t>(i)];
      t.type = i < 4 ? azr::buffer::TaskType::Deduction : azr::buffer::TaskType::Induction;
      t.origin = i == 0 ? azr::buffer::Origin::Seed : azr::buffer::Origin::Proposed;
      t.program = "def f(x):\n    return x * " + std::to_string(i);
      t.input = "2";
      t.output = std::to_string(2 * i);
      t.inputs = {"1", "2"};
      t.outputs = {std::to_string(i), std::to_string(2 * i)};
      t.message = "multiply";
      t.step = i;
    }
    auto r = b.insert(tasks);
    b.record_attempts(r.ids[1], 8, 2, true);  // learnability 0.25
    b.record_attempts(r.ids[2], 8, 6, true);  // 0.75
    b.record_attempts(r.ids[3], 4, 4, true);  // 1.0
  }
  auto by_learn = json_lines(
      run_process({azr(), "buffer", "list", db, "--type", "deduction", "--sort", "learnability", "--desc", "--json"}).out);
  ASSERT_EQ(by_learn.size(), 4u);
  EXPECT_EQ(by_learn[0]["id"], 4);
  EXPECT_EQ(by_learn[1]["id"], 3);
  EXPECT_EQ(by_learn[2]["id"], 2);
  EXPECT_EQ(by_learn[3]["id"], 1);  // never estimated: last
  auto steps = json_lines(run_process({azr(), "buffer", "list", db, "--steps", "2:4", "--json"}).out);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0]["step"], 2);
  EXPECT_EQ(steps[2]["step"], 4);
  EXPECT_EQ(steps[2]["type"], "induction");
  auto seeds = json_lines(run_process({azr(), "buffer", "list", db, "--origin", "seed", "--json"}).out);
  ASSERT_EQ(seeds.size(), 1u);

  auto table = run_process({azr(), "buffer", "list", db});
  ASSERT_EQ(table.exit_code, 0);
  std::istringstream lines(table.out);
  std::string header, row;
  std::getline(lines, header);
  std::getline(lines, row);
  EXPECT_EQ(header.rfind("id  type", 0), 0u) << header;
  EXPECT_EQ(header.find("program"), row.find("def f(x):")) << "columns are not aligned:\n" << header << "\n" << row;

  // Each bad value: exit 2 and the message that names the flag and the value.
  const std::pair<std::vector<std::string>, std::string> bad[] = {
      {{"list", db, "--steps", "x:3"}, "azr: --steps takes integers A:B, not 'x:3'\n"},
      {{"list", db, "--steps", "3"}, "azr: --steps takes A:B (either side may be empty), not '3'\n"},
      {{"list", db, "--type", "sorting"}, "azr: --type must be deduction, abduction or induction, not 'sorting'\n"},
      {{"list", db, "--sort", "vibes"}, "azr: --sort must be id, step, learnability or solve-rate, not 'vibes'\n"},
      {{"list", db, "--origin", "bogus"}, "azr: --origin must be seed, proposed or imported, not 'bogus'\n"},
      {{"show", db, "99"}, "azr: " + db + ": no task with id 99\n"},
  };
  for (const auto& [args, message] : bad) {
    std::vector<std::string> argv = {azr(), "buffer"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << message;
    EXPECT_EQ(r.err, message);
  }
  const auto reversed = run_process({azr(), "buffer", "list", db, "--steps", "4:2"});  // selected nothing, exit 0
  EXPECT_EQ(reversed.exit_code, 2);
  EXPECT_NE(reversed.err.find("--steps 4:2: the first step is after the last"), std::string::npos) << reversed.err;
  // "-3:" read as Python's slice (the last three steps) listed every task: steps count from 0.
  for (const std::string steps : {"-3:2", "-3:", ":-1"}) {
    const auto negative = run_process({azr(), "buffer", "list", db, "--steps=" + steps});
    EXPECT_EQ(negative.exit_code, 2) << steps;
    EXPECT_EQ(negative.err, "azr: --steps " + steps + ": steps count from 0 (the seed tasks), not from the end; "
                            "for the newest steps give the first of them (azr buffer stats shows the newest step)\n");
    EXPECT_EQ(negative.out, "");
  }
  const auto limit = run_process({azr(), "buffer", "list", db, "--limit", "-3"});
  EXPECT_EQ(limit.exit_code, 2);
  EXPECT_EQ(limit.err, "azr: --limit: -3 is too small: it must be 0 or more\n");
  // A value's check is one line, as a conversion's is: CLI11's "Run with --help" line is not added.
  const auto not_a_number = run_process({azr(), "buffer", "list", db, "--limit", "abc"});
  EXPECT_EQ(not_a_number.exit_code, 2);
  EXPECT_EQ(not_a_number.err, "azr: --limit: expected a finite number, got 'abc'\n");
  const auto fraction = run_process({azr(), "buffer", "list", db, "--limit", "1.5"});
  EXPECT_EQ(fraction.exit_code, 2);
  EXPECT_EQ(fraction.err, "azr: --limit: expected a whole number, got '1.5'\n");
  EXPECT_EQ(run_process({azr(), "buffer", "show", db, "5"}).exit_code, 0);  // induction: pairs table
}

// ---- refusals that must leave every file as it was ----------------------------------------------

// Every file in `d` whose name holds ".tmp-": what an interrupted export or import would leave.
std::vector<std::string> temp_files(const fs::path& d) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(d))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) out.push_back(e.path().string());
  return out;
}

// Overwrites the page in the middle of an SQLite file with garbage (page size from the header,
// bytes 16-17 big-endian, as the file format defines it). Returns the page number (1-based).
int64_t corrupt_middle_page(const std::string& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  unsigned char hdr[18];
  f.read(reinterpret_cast<char*>(hdr), sizeof hdr);
  int64_t page = (hdr[16] << 8) | hdr[17];
  int64_t pages = static_cast<int64_t>(fs::file_size(file)) / page;
  f.seekp((pages / 2) * page);
  f << std::string(static_cast<size_t>(page), '\xA5');
  return pages / 2 + 1;
}

TEST_F(BufferCli, ExportNeverOverwritesTheDatabaseOrLeavesATempFile) {
  std::string db = path("b.db");
  ASSERT_EQ(run_process({azr(), "buffer", "import", db, write("t.jsonl", cruxeval_tasks())}).exit_code, 0);
  const std::string bytes = read(db);
  fs::create_directories(dir_ / "sub");
  fs::create_symlink(db, path("link.db"));
  // The database itself, by another spelling, through a symlink, or its write-ahead log's name.
  for (const std::string& out : {db, path("sub/../b.db"), path("link.db"), db + "-wal"}) {
    auto r = run_process({azr(), "buffer", "export", db, "-o", out});
    EXPECT_EQ(r.exit_code, 2) << out;
    EXPECT_NE(r.err.find("is the database being exported"), std::string::npos) << r.err;
    EXPECT_TRUE(read(db) == bytes) << out;
  }
  EXPECT_TRUE(!fs::exists(db + "-wal") || fs::file_size(db + "-wal") == 0);  // no JSONL there either
  // A directory: refused before any work, and nothing written beside it.
  auto dir = run_process({azr(), "buffer", "export", db, "-o", path("sub")});
  EXPECT_EQ(dir.exit_code, 2);
  EXPECT_NE(dir.err.find("is a directory"), std::string::npos) << dir.err;
  EXPECT_EQ(dir.err.find("exported"), std::string::npos) << dir.err;
  EXPECT_TRUE(temp_files(dir_).empty());
  EXPECT_TRUE(fs::is_empty(dir_ / "sub"));
  EXPECT_EQ(total(db), 800);
  // A place no file can be made in: the system's reason is said ("cannot write" alone was not).
  auto under_a_file = run_process({azr(), "buffer", "export", db, "-o", db + "/out.jsonl"});
  EXPECT_EQ(under_a_file.exit_code, 2);
  EXPECT_NE(under_a_file.err.find(db + "/out.jsonl: cannot write (Not a directory)"), std::string::npos)
      << under_a_file.err;
  auto missing = run_process({azr(), "buffer", "import", db, path("missing.jsonl")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find(path("missing.jsonl") + ": cannot open file (No such file or directory)"),
            std::string::npos)
      << missing.err;
}

TEST_F(BufferCli, RefusedImportCreatesNoDatabase) {
  std::string bad = write("bad.jsonl", "{oops\n"), db = path("fresh.db");
  auto r = run_process({azr(), "buffer", "import", db, bad});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.jsonl:1:"), std::string::npos) << r.err;
  fs::create_directories(dir_ / "in");
  auto d = run_process({azr(), "buffer", "import", db, path("in")});  // a directory as the input
  EXPECT_EQ(d.exit_code, 2);
  EXPECT_NE(d.err.find(path("in") + ": is a directory"), std::string::npos) << d.err;
  for (const auto& e : fs::directory_iterator(dir_))  // no fresh.db, no fresh.db.tmp-*, no -wal
    EXPECT_EQ(e.path().filename().string().find("fresh.db"), std::string::npos) << e.path();
  // A good import still creates it, complete and with nothing beside it.
  ASSERT_EQ(run_process({azr(), "buffer", "import", db, write("t.jsonl", cruxeval_tasks())}).exit_code, 0);
  EXPECT_FALSE(fs::exists(db + "-wal"));  // (before any reader, which may open one)
  EXPECT_TRUE(temp_files(dir_).empty());
  EXPECT_EQ(total(db), 800);
}

TEST_F(BufferCli, DirectoryAsImportInputLeavesTheDatabaseAlone) {
  std::string db = path("b.db");
  ASSERT_EQ(run_process({azr(), "buffer", "import", db, write("t.jsonl", cruxeval_tasks())}).exit_code, 0);
  const std::string bytes = read(db);
  auto r = run_process({azr(), "buffer", "import", db, dir_.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  EXPECT_TRUE(read(db) == bytes);
}

TEST_F(BufferCli, MigrateRefusesMissingAndEmptyFiles) {
  auto missing = run_process({azr(), "buffer", "migrate", path("typo.db")});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("typo.db: no such file"), std::string::npos) << missing.err;
  EXPECT_FALSE(fs::exists(path("typo.db")));
  std::string empty = write("empty.db", "");
  auto e = run_process({azr(), "buffer", "migrate", empty});
  EXPECT_EQ(e.exit_code, 2);
  EXPECT_NE(e.err.find("empty.db: empty file"), std::string::npos) << e.err;
  EXPECT_EQ(fs::file_size(empty), 0u);
  std::string db = path("b.db");
  ASSERT_EQ(run_process({azr(), "buffer", "import", db, write("t.jsonl", cruxeval_tasks())}).exit_code, 0);
  EXPECT_EQ(run_process({azr(), "buffer", "migrate", db}).exit_code, 0);
  EXPECT_EQ(total(db), 800);
}

TEST_F(BufferCli, CorruptDatabaseIsReportedAndNeverWritten) {
  std::string db = path("b.db");
  ASSERT_EQ(run_process({azr(), "buffer", "import", db, write("t.jsonl", cruxeval_tasks())}).exit_code, 0);
  ASSERT_FALSE(fs::exists(db + "-wal"));  // everything is in the main file: its bytes are the truth
  corrupt_middle_page(db);
  const std::string bytes = read(db);
  std::string more =
      write("more.jsonl", R"({"type":"abduction","program":"def f(x): return x","input":"1","output":"1"})" "\n");
  for (const char* cmd : {"import", "migrate"}) {
    std::vector<std::string> args = {azr(), "buffer", cmd, db};
    if (std::string(cmd) == "import") args.push_back(more);
    auto r = run_process(args);
    EXPECT_EQ(r.exit_code, 2) << cmd;
    EXPECT_NE(r.err.find(db + ": database file is corrupt"), std::string::npos) << r.err;
    EXPECT_TRUE(read(db) == bytes) << cmd;
    EXPECT_TRUE(!fs::exists(db + "-wal") || fs::file_size(db + "-wal") == 0) << cmd;
  }
  // Reads are refused too, naming the file: a prompt sampled its references from the pages that
  // still read, and said nothing.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{azr(), "buffer", "export", db}, std::vector<std::string>{azr(), "buffer", "stats", db},
        std::vector<std::string>{azr(), "buffer", "list", db},
        std::vector<std::string>{azr(), "task", "prompt", "--role", "proposer", "--type", "deduction", "--db", db,
                                 "--seed", "1"}}) {
    auto r = run_process(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << " " << args[2] << ": " << r.err;
    EXPECT_NE(r.err.find(db + ": database file is corrupt"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << args[1] << " " << args[2];
  }
  auto file = run_process({azr(), "buffer", "export", db, "-o", path("out.jsonl")});
  EXPECT_EQ(file.exit_code, 2);
  EXPECT_FALSE(fs::exists(path("out.jsonl")));
  EXPECT_TRUE(temp_files(dir_).empty());
  EXPECT_TRUE(read(db) == bytes);
}

TEST_F(BufferCli, HelpSaysWhichCommandsWrite) {
  for (const char* cmd : {"import", "migrate"}) {
    auto r = run_process({azr(), "buffer", cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_EQ(r.out.find("read-only"), std::string::npos) << cmd << ":\n" << r.out;
    EXPECT_NE(r.out.find("Writes the database"), std::string::npos) << cmd << ":\n" << r.out;
  }
}

}  // namespace
