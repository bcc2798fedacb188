// The zero-human-data program generator (bootstrap/program_gen.h). The independent truth is
// CPython itself: every generated program of many seeds is parsed (ast), inspected (one `def f`,
// statement counts, nesting, which constructs occur), run on its inputs under two hash seeds, and
// the reprs it prints are compared with what the sandbox returned for generate_tasks' tasks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bootstrap/program_gen.h"
#include "tests/test_support.h"

namespace azr::bootstrap {
namespace {

using buffer::TaskType;
using nlohmann::json;
namespace sb = azr::sandbox;

// Reads a JSON list of {program, inputs}; writes one result object per item.
constexpr const char* kChecker = R"PY(
import ast, json, signal, sys
items = json.load(open(sys.argv[1]))
class Timeout(Exception):
    pass
def on_alarm(*a):
    raise Timeout()
signal.signal(signal.SIGALRM, on_alarm)
def depth(stmts, d):
    m = d
    for s in stmts:
        if isinstance(s, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            for sub in (s.body, getattr(s, 'orelse', [])):
                if sub:
                    m = max(m, depth(sub, d + 1))
    return m
out = []
for it in items:
    r = {'parse': 'ok'}
    out.append(r)
    try:
        tree = ast.parse(it['program'])
    except SyntaxError as e:
        r['parse'] = 'SyntaxError: ' + str(e)
        continue
    body = tree.body
    r['one_f'] = len(body) == 1 and isinstance(body[0], ast.FunctionDef) and body[0].name == 'f'
    fn = body[0]
    r['nparams'] = len(fn.args.args)
    r['ends_return'] = isinstance(fn.body[-1], ast.Return)
    r['top'] = len(fn.body) - (1 if r['ends_return'] else 0)
    r['depth'] = depth(fn.body, 0)
    r['kinds'] = sorted({type(n).__name__ for n in ast.walk(tree)})
    lit = []
    for inp in it['inputs']:
        try:
            ast.literal_eval('(' + inp + ',)')
            lit.append(True)
        except Exception:
            lit.append(False)
    r['literal'] = lit
    g = {}
    outs = []
    exec(compile(tree, '<program>', 'exec'), g)
    for inp in it['inputs']:
        signal.setitimer(signal.ITIMER_REAL, 2.0)
        try:
            outs.append(repr(eval('f(' + inp + ')', g)))
        except Timeout:
            outs.append('!timeout')
        except Exception as e:
            outs.append('!' + type(e).__name__ + ': ' + str(e))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    r['outs'] = outs
json.dump(out, open(sys.argv[2], 'w'))
)PY";

struct Item {
  std::string program;
  std::vector<std::string> inputs;
};

// Runs the checker on `items` under PYTHONHASHSEED=hash_seed.
std::vector<json> cpython_check(const std::vector<Item>& items, int hash_seed) {
  std::string python = azr::testing::env_or_fail("AZR_PYTHON");
  char dir_tmpl[] = "/tmp/azr_progen_XXXXXX";
  std::string dir = mkdtemp(dir_tmpl);
  std::string script = dir + "/check.py", in = dir + "/in.json", out = dir + "/out.json";
  std::ofstream(script) << kChecker;
  json j = json::array();
  for (const auto& it : items) j.push_back({{"program", it.program}, {"inputs", it.inputs}});
  std::ofstream(in) << j.dump();
  std::string seed_env = "PYTHONHASHSEED=" + std::to_string(hash_seed);
  std::vector<char> seed_buf(seed_env.begin(), seed_env.end());
  seed_buf.push_back('\0');
  char* envp[] = {seed_buf.data(), nullptr};
  auto r = azr::testing::run_process({python, "-S", "-s", script, in, out}, "", envp);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<json> res;
  if (r.exit_code == 0) {
    for (auto& x : json::parse(ss.str())) res.push_back(x);
  }
  std::remove(script.c_str());
  std::remove(in.c_str());
  std::remove(out.c_str());
  rmdir(dir.c_str());
  return res;
}

bool has_kind(const json& r, const std::string& kind) {
  for (const auto& k : r["kinds"])
    if (k.get<std::string>() == kind) return true;
  return false;
}

constexpr int kSeeds = 300;

TEST(ProgramGen, SameSeedSameTextDifferentSeedsDiffer) {
  for (int level = 0; level <= 2; ++level) {
    GenSettings s = preset(level);
    std::set<std::string> programs, inputs;
    for (uint64_t seed = 0; seed < kSeeds; ++seed) {
      GeneratedProgram a = generate_program(seed, s, 5), b = generate_program(seed, s, 5);
      ASSERT_EQ(a.program, b.program) << "seed " << seed;
      ASSERT_EQ(a.inputs, b.inputs) << "seed " << seed;
      programs.insert(a.program);
      inputs.insert(a.inputs[0]);
    }
    std::cout << "preset " << level << ": " << programs.size() << "/" << kSeeds << " distinct programs, "
              << inputs.size() << " distinct first inputs\n";
    EXPECT_GT(programs.size(), kSeeds * 9 / 10) << "preset " << level;
    EXPECT_GT(inputs.size(), kSeeds / 2) << "preset " << level;
  }
  // Pinned text: the generator uses no implementation-defined distribution, so this is the same
  // on every platform (a deliberate generator change updates it).
  GeneratedProgram p = generate_program(12345, GenSettings{}, 2);
  std::cout << "seed 12345:\n" << p.program << "\ninputs: " << p.inputs[0] << " | " << p.inputs[1] << "\n";
}

TEST(ProgramGen, CPythonAcceptsEveryProgramAndRunsItDeterministically) {
  for (int level = 0; level <= 2; ++level) {
    GenSettings s = preset(level);
    std::vector<Item> items;
    std::vector<GeneratedProgram> gens;
    for (uint64_t seed = 1000; seed < 1000 + kSeeds; ++seed) {
      gens.push_back(generate_program(seed, s, 5));
      items.push_back({gens.back().program, gens.back().inputs});
    }
    auto r0 = cpython_check(items, 0), r1 = cpython_check(items, 1);
    ASSERT_EQ(r0.size(), items.size());
    ASSERT_EQ(r1.size(), items.size());
    int exceptions = 0, large = 0, long_programs = 0, total_lines = 0;
    std::map<int, int> stmt_hist;
    for (size_t i = 0; i < items.size(); ++i) {
      const auto& r = r0[i];
      const std::string& prog = items[i].program;
      ASSERT_EQ(r["parse"], "ok") << prog;
      EXPECT_TRUE(r["one_f"].get<bool>()) << prog;
      EXPECT_TRUE(r["ends_return"].get<bool>()) << prog;
      EXPECT_EQ(r["nparams"].get<size_t>(), gens[i].params.size()) << prog;
      EXPECT_GE(r["nparams"].get<int>(), s.min_params);
      EXPECT_LE(r["nparams"].get<int>(), s.max_params);
      int top = r["top"].get<int>();
      EXPECT_GE(top, s.min_statements) << prog;
      EXPECT_LE(top, s.max_statements) << prog;
      ++stmt_hist[top];
      EXPECT_LE(r["depth"].get<int>(), s.max_depth) << prog;
      EXPECT_EQ(prog.rfind("def f(", 0), 0u) << prog;
      for (bool lit : r["literal"]) EXPECT_TRUE(lit) << prog;
      for (const auto& in : items[i].inputs) {
        EXPECT_EQ(in.find('('), std::string::npos) << in;  // no calls
        EXPECT_FALSE(in.empty());
      }
      // The same reprs under another hash seed.
      EXPECT_EQ(r["outs"], r1[i]["outs"]) << prog;
      for (const auto& o : r["outs"]) {
        std::string out = o.get<std::string>();
        EXPECT_NE(out, "!timeout") << prog;
        if (!out.empty() && out[0] == '!') {
          ++exceptions;
          ADD_FAILURE() << "exception " << out << " in\n" << prog;
        } else if (out.size() > s.max_output_chars) {
          ++large;
        }
      }
      if (prog.size() > s.max_program_chars) ++long_programs;
      total_lines += static_cast<int>(std::count(prog.begin(), prog.end(), '\n')) + 1;
    }
    std::cout << "preset " << level << ": " << exceptions << " exceptions, " << large << "/" << kSeeds * 5
              << " outputs over " << s.max_output_chars << " chars, " << long_programs << " programs over "
              << s.max_program_chars << " chars, mean lines "
              << static_cast<double>(total_lines) / kSeeds << ", top-level statements:";
    for (auto [k, v] : stmt_hist) std::cout << " " << k << "x" << v;
    std::cout << "\n";
    EXPECT_EQ(exceptions, 0);
    EXPECT_LT(large, kSeeds * 5 / 10);
    EXPECT_LT(long_programs, kSeeds / 50);
    EXPECT_GE(stmt_hist.size(), static_cast<size_t>(s.max_statements - s.min_statements + 1) - 0u);
  }
}

// No loop changes the variable its range() was taken from (a parameter `b` in `range(b)`, the
// list in `range(len(xs))`), nor the string or list it iterates, in its body: inside another
// loop, `for i in range(b): b += i * 2` squared b at each outer pass (`for c in t: t = 'c' + t`
// doubled t), and the program's run time (and so whether it validated) hung on the machine's
// load. Read by CPython's ast over 4,000 programs a level; none is run.
constexpr const char* kBoundChecker = R"PY(
import ast, json, sys
MUTATORS = {'append', 'extend', 'insert', 'pop', 'remove', 'clear', 'sort', 'reverse'}
def bound_name(it):
    if isinstance(it, ast.Name):  # `for c in t`: t rebuilt in the body grows at each outer pass
        return it.id
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == 'range' and len(it.args) == 1):
        return None
    a = it.args[0]
    if isinstance(a, ast.Name):
        return a.id
    if (isinstance(a, ast.Call) and isinstance(a.func, ast.Name) and a.func.id == 'len'
            and isinstance(a.args[0], ast.Name)):
        return a.args[0].id
    return None
def changes(node, name):
    for n in ast.walk(node):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                and n.func.value.id == name and n.func.attr in MUTATORS):
            return True
    return False
bad = []
for k, program in enumerate(json.load(open(sys.argv[1]))):
    for n in ast.walk(ast.parse(program)):
        if isinstance(n, ast.For):
            name = bound_name(n.iter)
            if name and any(changes(s, name) for s in n.body):
                bad.append(k)
                break
print(json.dumps(bad))
)PY";

TEST(ProgramGen, NoLoopChangesWhatItIteratesOrTheVariableOfItsRange) {
  const std::string python = azr::testing::env_or_fail("AZR_PYTHON");
  for (int level = 1; level <= 2; ++level) {
    json programs = json::array();
    for (uint64_t seed = 0; seed < 4000; ++seed) programs.push_back(generate_program(seed, preset(level), 1).program);
    char dir_tmpl[] = "/tmp/azr_progen_XXXXXX";
    const std::string dir = mkdtemp(dir_tmpl);
    std::ofstream(dir + "/check.py") << kBoundChecker;
    std::ofstream(dir + "/in.json") << programs.dump();
    const auto r = azr::testing::run_process({python, "-S", "-s", dir + "/check.py", dir + "/in.json"});
    std::filesystem::remove_all(dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json bad = json::parse(r.out);
    EXPECT_TRUE(bad.empty()) << "level " << level << ": " << bad.size() << " programs, the first:\n"
                             << (bad.empty() ? "" : programs[bad[0].get<size_t>()].get<std::string>());
  }
}

// A held-out set shares no program with training: the same program with other inputs is another
// task (another fingerprint), but for induction the program is the answer. Hand-made tasks: the
// program `a` is in both sets with different inputs and goes; order and the limit are kept.
TEST(ProgramGen, HeldOutTasksShareNoProgramWithTraining) {
  auto task = [](const std::string& program, const std::string& input) {
    buffer::Task t;
    t.type = TaskType::Induction;
    t.program = program;
    t.inputs = {input};
    return t;
  };
  const std::string plus_one = "def f(x):\n    return x + 1", same = "def f(x):\n    return x";
  const std::vector<buffer::Task> train = {task(plus_one, "1"), task(same, "2")};
  const std::vector<buffer::Task> candidates = {task(plus_one, "5"), task("def f(x):\n    return 2", "1"),
                                                task(same, "9"), task("def f(x):\n    return 3", "1"),
                                                task("def f(x):\n    return 4", "1")};
  ASSERT_NE(buffer::fingerprint(candidates[0]), buffer::fingerprint(train[0]));  // other tasks, one program
  auto kept = without_programs_of(candidates, train);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].program, candidates[1].program);
  EXPECT_EQ(kept[1].program, candidates[3].program);
  EXPECT_EQ(kept[2].program, candidates[4].program);
  EXPECT_EQ(without_programs_of(candidates, train, 2).size(), 2u);
  EXPECT_EQ(without_programs_of(candidates, {}, -1).size(), candidates.size());
}

TEST(ProgramGen, DifficultyControls) {
  struct Case {
    std::string name;
    GenSettings s;
  };
  std::vector<Case> cases;
  {
    GenSettings s;
    s.strings = false;
    cases.push_back({"no_strings", s});
  }
  {
    GenSettings s;
    s.lists = false;
    s.comprehensions = false;
    cases.push_back({"no_lists", s});
  }
  {
    GenSettings s;
    s.loops = false;
    cases.push_back({"no_loops", s});
  }
  {
    GenSettings s;
    s.conditionals = false;
    cases.push_back({"no_conditionals", s});
  }
  {
    GenSettings s;
    s.comprehensions = false;
    cases.push_back({"no_comprehensions", s});
  }
  {
    GenSettings s;
    s.max_depth = 0;
    cases.push_back({"flat", s});
  }
  {
    GenSettings s;
    s.min_statements = s.max_statements = 3;
    s.max_depth = 1;
    cases.push_back({"three_statements", s});
  }
  {
    GenSettings s;
    s.dicts = true;
    s.min_params = s.max_params = 2;
    cases.push_back({"dicts_two_params", s});
  }
  for (const auto& c : cases) {
    const GenSettings& s = c.s;
    std::vector<Item> items;
    std::vector<GeneratedProgram> gens;
    for (uint64_t seed = 0; seed < 200; ++seed) {
      gens.push_back(generate_program(seed, s, 3));
      items.push_back({gens.back().program, gens.back().inputs});
    }
    auto res = cpython_check(items, 0);
    ASSERT_EQ(res.size(), items.size()) << c.name;
    int depth_max = 0, dict_params = 0, loops = 0, ifs = 0, comps = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const auto& r = res[i];
      const auto& prog = items[i].program;
      ASSERT_EQ(r["parse"], "ok") << c.name << "\n" << prog;
      for (const auto& o : r["outs"]) EXPECT_NE(o.get<std::string>()[0], '!') << c.name << "\n" << prog << "\n" << o;
      depth_max = std::max(depth_max, r["depth"].get<int>());
      EXPECT_LE(r["depth"].get<int>(), s.max_depth) << c.name << "\n" << prog;
      EXPECT_GE(r["top"].get<int>(), s.min_statements) << c.name << "\n" << prog;
      EXPECT_LE(r["top"].get<int>(), s.max_statements) << c.name << "\n" << prog;
      EXPECT_GE(r["nparams"].get<int>(), s.min_params) << c.name;
      EXPECT_LE(r["nparams"].get<int>(), s.max_params) << c.name;
      for (const auto& t : gens[i].param_types) {
        if (!s.strings) {
          EXPECT_NE(t, "str") << c.name << "\n" << prog;
        }
        if (!s.lists) {
          EXPECT_NE(t, "list") << c.name << "\n" << prog;
        }
        if (!s.dicts) {
          EXPECT_NE(t, "dict") << c.name << "\n" << prog;
        }
        if (t == "dict") ++dict_params;
      }
      if (!s.strings) {
        for (const auto& in : items[i].inputs) {
          // Only int and list arguments: no quotes at all.
          EXPECT_EQ(in.find('\''), std::string::npos) << c.name << " " << in;
        }
      }
      bool loop = has_kind(r, "For"), cond = has_kind(r, "If") || has_kind(r, "IfExp"),
           comp = has_kind(r, "ListComp") || has_kind(r, "DictComp");
      loops += loop;
      ifs += cond;
      comps += comp;
      if (!s.loops) {
        EXPECT_FALSE(loop) << c.name << "\n" << prog;
      }
      if (!s.conditionals) {
        EXPECT_FALSE(cond) << c.name << "\n" << prog;
      }
      if (!s.comprehensions) {
        EXPECT_FALSE(comp) << c.name << "\n" << prog;
      }
    }
    std::cout << c.name << ": max depth " << depth_max << ", with for " << loops << ", with if " << ifs
              << ", with comprehension " << comps << ", dict params " << dict_params << " (of 200)\n";
    // What is enabled does occur.
    if (s.loops && s.max_depth > 0) {
      EXPECT_GT(loops, 20) << c.name;
    }
    if (s.conditionals) {
      EXPECT_GT(ifs, 20) << c.name;
    }
    if (s.comprehensions && s.lists) {
      EXPECT_GT(comps, 10) << c.name;
    }
    if (s.dicts) {
      EXPECT_GT(dict_params, 20) << c.name;
    }
    if (s.max_depth >= 1 && (s.loops || s.conditionals)) {
      EXPECT_EQ(depth_max, s.max_depth) << c.name;
    }
  }
}

class ProgramGenTasks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pool_ = std::make_unique<sb::Pool>(sb::PoolOptions{}); }
  static void TearDownTestSuite() { pool_.reset(); }
  static std::unique_ptr<sb::Pool> pool_;
};
std::unique_ptr<sb::Pool> ProgramGenTasks::pool_;

TEST_F(ProgramGenTasks, RealTasksOfEveryTypeMatchCPython) {
  struct Want {
    TaskType type;
    int count;
    int level;
  };
  for (Want w : {Want{TaskType::Deduction, 60, 1}, Want{TaskType::Abduction, 60, 2}, Want{TaskType::Induction, 30, 1},
                 Want{TaskType::Deduction, 40, 0}}) {
    GenSettings s = preset(w.level);
    TaskGenReport rep;
    auto t0 = std::chrono::steady_clock::now();
    auto tasks = generate_tasks(*pool_, w.type, w.count, 77, s, &rep);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double rate = rep.attempted ? static_cast<double>(rep.valid) / static_cast<double>(rep.attempted) : 0;
    std::cout << buffer::type_name(w.type) << " (preset " << w.level << "): " << tasks.size() << " tasks, "
              << rep.valid << "/" << rep.attempted << " valid (" << 100 * rate << "%), " << secs << " s, "
              << tasks.size() / secs << " tasks/s; rejected:";
    for (auto& [k, v] : rep.rejected) std::cout << " " << k << "=" << v;
    std::cout << "\n";
    ASSERT_EQ(static_cast<int>(tasks.size()), w.count);
    EXPECT_EQ(rep.valid, w.count);
    EXPECT_GT(rate, 0.7);
    std::vector<Item> items;
    std::set<std::string> programs;
    for (const auto& t : tasks) {
      EXPECT_EQ(t.type, w.type);
      EXPECT_EQ(t.origin, buffer::Origin::Seed);
      EXPECT_EQ(t.program.rfind("def f(", 0), 0u);
      programs.insert(t.program);
      if (w.type == TaskType::Induction) {
        EXPECT_EQ(t.inputs.size(), 10u);
        EXPECT_EQ(t.outputs.size(), 10u);
        EXPECT_FALSE(t.message.empty());
        EXPECT_TRUE(t.input.empty() && t.output.empty());
        std::set<std::string> outs(t.outputs.begin(), t.outputs.end());
        EXPECT_GT(outs.size(), 1u) << t.program;
        items.push_back({t.program, t.inputs});
      } else {
        EXPECT_FALSE(t.input.empty());
        EXPECT_FALSE(t.output.empty());
        EXPECT_LE(t.output.size(), s.max_output_chars);
        EXPECT_TRUE(t.inputs.empty() && t.outputs.empty() && t.message.empty());
        items.push_back({t.program, {t.input}});
      }
    }
    EXPECT_GT(programs.size(), tasks.size() * 9 / 10);
    // CPython's own repr of f(<input>) is what the sandbox stored.
    auto res = cpython_check(items, 0);
    ASSERT_EQ(res.size(), tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) {
      std::vector<std::string> want =
          w.type == TaskType::Induction ? tasks[i].outputs : std::vector<std::string>{tasks[i].output};
      EXPECT_EQ(res[i]["outs"].get<std::vector<std::string>>(), want) << tasks[i].program;
    }
  }
  std::cout << "example induction message: "
            << induction_message(generate_program(3, GenSettings{}, 1), 3) << "\n";
}

TEST_F(ProgramGenTasks, SameSeedSameTasks) {
  GenSettings s;
  auto a = generate_tasks(*pool_, TaskType::Abduction, 15, 4242, s);
  auto b = generate_tasks(*pool_, TaskType::Abduction, 15, 4242, s);
  auto c = generate_tasks(*pool_, TaskType::Abduction, 15, 9999, s);
  ASSERT_EQ(a.size(), 15u);
  ASSERT_EQ(b.size(), 15u);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].program, b[i].program);
    EXPECT_EQ(a[i].input, b[i].input);
    EXPECT_EQ(a[i].output, b[i].output);
    differ += i < c.size() && c[i].program != a[i].program;
  }
  EXPECT_GT(differ, 12);
}

TEST_F(ProgramGenTasks, MaxAttemptsBoundsTheWork) {
  GenSettings s;
  TaskGenReport rep;
  auto tasks = generate_tasks(*pool_, TaskType::Deduction, 50, 1, s, &rep, 10, 5);
  EXPECT_LE(tasks.size(), 5u);
  EXPECT_EQ(rep.attempted, 5);
  int64_t rejected = 0;
  for (auto& [k, v] : rep.rejected) rejected += v;
  EXPECT_EQ(rep.valid + rejected, rep.attempted);
}

}  // namespace
}  // namespace azr::bootstrap
