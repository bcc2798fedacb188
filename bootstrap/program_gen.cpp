// The zero-human-data program generator (bootstrap/program_gen.h).
#include "bootstrap/program_gen.h"

#include <algorithm>
#include <cctype>
#include <random>
#include <set>
#include <string_view>
#include <utility>

#include "proposer/validate.h"

namespace azr::bootstrap {
namespace {

// ---------------------------------------------------------------------------------------------
// Randomness: std::mt19937_64's sequence is fixed by the standard; the range mapping is ours.
class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed ^ 0x9E3779B97F4A7C15ull) {}
  uint64_t next() { return g_(); }
  // Uniform-ish integer in [lo, hi] (modulo bias is irrelevant here and portable).
  int range(int lo, int hi) {
    if (hi <= lo) return lo;
    return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool chance(int percent) { return range(0, 99) < percent; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(range(0, static_cast<int>(v.size()) - 1))];
  }
  // Index by weights (all >= 0, at least one > 0).
  int weighted(const std::vector<int>& w) {
    int total = 0;
    for (int x : w) total += x;
    int r = range(0, total - 1);
    for (size_t i = 0; i < w.size(); ++i) {
      if (r < w[i]) return static_cast<int>(i);
      r -= w[i];
    }
    return static_cast<int>(w.size()) - 1;
  }

 private:
  std::mt19937_64 g_;
};

enum class Ty { Int, Str, List, Dict };

const char* ty_name(Ty t) {
  switch (t) {
    case Ty::Int: return "int";
    case Ty::Str: return "str";
    case Ty::List: return "list";
    case Ty::Dict: return "dict";
  }
  return "int";
}

struct Var {
  std::string name;
  Ty ty;
  bool nonempty = false;  // lists/dicts: known non-empty
  bool small = false;     // ints: an unmodified parameter or loop index (usable in range())
  bool chr = false;       // strs: a one-character loop variable
  bool loopvar = false;   // a loop's own variable: read, never updated
};

// An expression with its precedence (for parenthesising) and, for lists/dicts, non-emptiness.
struct Ex {
  std::string text;
  int prec = 100;  // 100 atom/call, 60 unary, 50 * // %, 40 + -, 30 comparison, 20 not, 10 if-else
  bool nonempty = false;
  bool var = false;  // mentions a variable (not a constant expression)
};

constexpr int kAtom = 100, kMul = 50, kAdd = 40, kCmp = 30, kNot = 20, kCond = 10;

std::string wrap(const Ex& e, int min_prec) { return e.prec < min_prec ? "(" + e.text + ")" : e.text; }

const std::vector<std::string> kCodeLetters = {"a", "b", "c"};
const char kInputAlphabet[] = "abcde";

class Generator {
 public:
  Generator(uint64_t seed, const GenSettings& s) : r_(seed), s_(s) {}

  GeneratedProgram program(int n_inputs) {
    GeneratedProgram best;
    for (int attempt = 0; attempt < 40; ++attempt) {
      GeneratedProgram p = one();
      bool fits = p.program.size() <= s_.max_program_chars;
      bool uses_all = all_params_used(p);
      if (fits && uses_all) {
        best = std::move(p);
        break;
      }
      if (best.program.empty() || (fits && best.program.size() > s_.max_program_chars)) best = std::move(p);
    }
    best.inputs = inputs_for(best, n_inputs);
    return best;
  }

 private:
  Rng r_;
  const GenSettings& s_;
  std::vector<Var> scope_;
  std::set<std::string> used_;
  std::vector<std::string> frozen_;  // lists/dicts being iterated: never mutated
  std::vector<std::string> lines_;
  int loop_depth_ = 0;
  std::string focus_;  // the accumulator the current loop body should update first
  std::string top_focus_;  // what the top level computed last (the return's usual subject)
  std::string prefer_;     // var_or picks this variable more often
  bool force_comp_ = false;  // the next list expression is a comprehension

  // An int expression that mentions a variable whenever one is in scope.
  Ex int_seed() {
    auto ints = vars(Ty::Int);
    auto strs = vars(Ty::Str);
    auto lists = vars(Ty::List);
    auto dicts = vars(Ty::Dict);
    if (!ints.empty() && r_.chance(70)) return {r_.pick(ints)->name, kAtom, false, true};
    std::vector<std::string> c;
    for (auto* v : strs) c.push_back(v->name);
    for (auto* v : lists) c.push_back(v->name);
    for (auto* v : dicts) c.push_back(v->name);
    if (!c.empty()) return {"len(" + r_.pick(c) + ")", kAtom, false, true};
    if (!ints.empty()) return {r_.pick(ints)->name, kAtom, false, true};
    return {std::to_string(r_.range(0, max_int())), kAtom};
  }
  bool mentions_var(const std::string& text) const {
    for (const auto& v : scope_)
      if (uses(text, v.name)) return true;
    return false;
  }
  Ex ensure_var(Ex e, Ty t) {
    if (e.var || mentions_var(e.text)) return e;
    if (t == Ty::Int) return int_seed();
    auto v = vars(t);
    if (v.empty()) return e;
    const Var* x = r_.pick(v);
    return {x->name, kAtom, x->nonempty, true};
  }
  // Types that some variable in scope has (int always, via len and friends).
  Ty live_type(bool with_dict) {
    std::vector<Ty> c = {Ty::Int};
    for (Ty t : {Ty::Str, Ty::List, Ty::Dict})
      if (!vars(t).empty() && (t != Ty::Dict || with_dict)) c.push_back(t);
    return r_.pick(c);
  }

  int max_int() const { return std::max(1, s_.max_int); }

  // ---- names --------------------------------------------------------------------------------
  std::string fresh(const std::vector<std::string>& pool) {
    std::vector<std::string> free;
    for (const auto& n : pool)
      if (!used_.count(n)) free.push_back(n);
    std::string name;
    if (!free.empty()) {
      name = r_.pick(free);
    } else {
      for (int i = 2;; ++i) {
        name = pool[0] + std::to_string(i);
        if (!used_.count(name)) break;
      }
    }
    used_.insert(name);
    return name;
  }
  std::string fresh_for(Ty t) {
    switch (t) {
      case Ty::Int: return fresh({"total", "acc", "c", "m", "q", "best", "cnt", "r"});
      case Ty::Str: return fresh({"res", "w", "u", "p", "out_s", "acc_s"});
      case Ty::List: return fresh({"ys", "out", "zs", "keep", "res_l", "lst"});
      case Ty::Dict: return fresh({"seen", "freq", "tbl", "dd"});
    }
    return fresh({"v"});
  }

  std::vector<const Var*> vars(Ty t, bool need_nonempty = false, bool need_small = false) const {
    std::vector<const Var*> v;
    for (const auto& x : scope_)
      if (x.ty == t && (!need_nonempty || x.nonempty) && (!need_small || x.small)) v.push_back(&x);
    return v;
  }
  Var* find(const std::string& name) {
    for (auto it = scope_.rbegin(); it != scope_.rend(); ++it)
      if (it->name == name) return &*it;
    return nullptr;
  }
  bool is_frozen(const std::string& name) const {
    return std::find(frozen_.begin(), frozen_.end(), name) != frozen_.end();
  }

  // ---- literals ------------------------------------------------------------------------------
  int int_value() { return r_.chance(80) ? r_.range(0, max_int()) : -r_.range(1, max_int()); }
  int small_pos() { return r_.range(2, std::max(2, std::min(max_int(), 5))); }
  std::string str_lit_code() {
    std::string s = r_.pick(kCodeLetters);
    if (r_.chance(30)) s += r_.pick(kCodeLetters);
    return "'" + s + "'";
  }
  std::string letter_lit() { return "'" + r_.pick(kCodeLetters) + "'"; }

  // ---- expressions ---------------------------------------------------------------------------
  Ex var_or(Ty t, int d) {
    auto v = vars(t);
    if (!v.empty() && r_.chance(85)) {
      const Var* x = r_.pick(v);
      if (!prefer_.empty() && r_.chance(60))
        for (auto* y : v)
          if (y->name == prefer_) x = y;
      return {x->name, kAtom, x->nonempty, true};
    }
    switch (t) {
      case Ty::Int: return {std::to_string(r_.range(1, max_int())), kAtom};
      case Ty::Str: return {str_lit_code(), kAtom};
      case Ty::List: {
        int n = r_.range(1, 3);
        std::string s = "[";
        for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(r_.range(0, max_int()));
        return {s + "]", kAtom, true};
      }
      case Ty::Dict:
        if (d > 0 && s_.strings && s_.comprehensions && !vars(Ty::Str).empty()) return dict_expr(d);
        return {"{" + letter_lit() + ": " + std::to_string(r_.range(0, max_int())) + "}", kAtom, true};
    }
    return {"0", kAtom};
  }

  Ex expr(Ty t, int d) {
    switch (t) {
      case Ty::Int: return int_expr(d);
      case Ty::Str: return str_expr(d);
      case Ty::List: return list_expr(d);
      case Ty::Dict: return dict_expr(d);
    }
    return {"0", kAtom};
  }

  Ex int_expr(int d) {
    if (d <= 0) return var_or(Ty::Int, 0);
    auto strs = vars(Ty::Str);
    auto lists = vars(Ty::List);
    auto nonempty = vars(Ty::List, true);
    auto dicts = vars(Ty::Dict);
    // 0 atom, 1 + -, 2 *, 3 // %, 4 len, 5 sum, 6 max/min, 7 index, 8 count/find, 9 dict, 10 abs, 11 ifexp
    std::vector<int> w = {30,
                          25,
                          8,
                          10,
                          (strs.empty() && lists.empty() && dicts.empty()) ? 0 : 10,
                          lists.empty() ? 0 : 8,
                          nonempty.empty() ? 0 : 6,
                          nonempty.empty() ? 0 : 8,
                          strs.empty() ? 0 : 8,
                          dicts.empty() ? 0 : 12,
                          3,
                          s_.conditionals ? 3 : 0};
    switch (r_.weighted(w)) {
      case 0: return var_or(Ty::Int, 0);
      case 1: {
        Ex a = ensure_var(int_expr(d - 1), Ty::Int), b = int_expr(d - 1);
        if (b.text == a.text) b = {std::to_string(r_.range(1, max_int())), kAtom};
        if (r_.chance(30)) std::swap(a, b);
        const char* op = r_.chance(60) ? " + " : " - ";
        return {wrap(a, kAdd) + op + wrap(b, kAdd + 1), kAdd, false, a.var || b.var};
      }
      case 2: {
        Ex a = ensure_var(int_expr(d - 1), Ty::Int);
        Ex b = r_.chance(50) ? Ex{std::to_string(small_pos()), kAtom} : int_expr(d - 1);
        if (b.text == a.text) b = {std::to_string(small_pos()), kAtom};
        return {wrap(a, kMul) + " * " + wrap(b, kMul + 1), kMul, false, true};
      }
      case 3: {
        Ex a = ensure_var(int_expr(d - 1), Ty::Int);
        const char* op = r_.chance(50) ? " // " : " % ";
        return {wrap(a, kMul) + op + std::to_string(small_pos()), kMul, false, a.var};
      }
      case 4: {
        std::vector<std::string> c;
        for (auto* v : strs) c.push_back(v->name);
        for (auto* v : lists) c.push_back(v->name);
        for (auto* v : dicts) c.push_back(v->name);
        return {"len(" + r_.pick(c) + ")", kAtom, false, true};
      }
      case 5: {
        Ex l = ensure_var(list_expr(d - 1), Ty::List);
        return {"sum(" + l.text + ")", kAtom, false, l.var};
      }
      case 6: return {std::string(r_.chance(50) ? "max(" : "min(") + r_.pick(nonempty)->name + ")", kAtom, false, true};
      case 7: {
        const std::string& xs = r_.pick(nonempty)->name;
        int k = r_.range(0, 2);
        if (k == 0) return {xs + "[0]", kAtom, false, true};
        if (k == 1) return {xs + "[-1]", kAtom, false, true};
        return {xs + "[" + wrap(int_expr(0), kMul) + " % len(" + xs + ")]", kAtom, false, true};
      }
      case 8:
        return {r_.pick(strs)->name + (r_.chance(70) ? ".count(" : ".find(") + letter_lit() + ")", kAtom, false,
                true};
      case 9: {
        const std::string& dn = r_.pick(dicts)->name;
        int k = r_.range(0, 2);
        if (k == 0 || strs.empty()) return {dn + ".get(" + letter_lit() + ", 0)", kAtom, false, true};
        if (k == 1) return {"sum(" + dn + ".values())", kAtom, false, true};
        return {dn + ".get(" + r_.pick(strs)->name + ", " + std::to_string(r_.range(0, 2)) + ")", kAtom, false, true};
      }
      case 10: {
        Ex a = ensure_var(int_expr(d - 1), Ty::Int);
        return {"abs(" + a.text + ")", kAtom, false, a.var};
      }
      default: {
        Ex a = int_expr(d - 1), b = int_expr(d - 1);
        if (b.text == a.text) b = {std::to_string(r_.range(0, max_int())), kAtom};
        if (a.text == b.text) return a;
        return {wrap(a, kCond + 1) + " if " + cond(d - 1).text + " else " + wrap(b, kCond), kCond, false, true};
      }
    }
  }

  Ex str_base(int d) { return ensure_var(str_expr(d), Ty::Str); }
  Ex str_expr(int d) {
    if (d <= 0) return var_or(Ty::Str, 0);
    if (vars(Ty::Str).empty() && r_.chance(60)) return {"str(" + int_seed().text + ")", kAtom, false, true};
    std::vector<int> w = {25, 10, 10, 12, 8, 6, 6, 6, 5, s_.conditionals ? 3 : 0};
    switch (r_.weighted(w)) {
      case 0: return var_or(Ty::Str, 0);
      case 1: return {wrap(str_base(d - 1), kAtom) + (r_.chance(50) ? ".upper()" : ".lower()"), kAtom};
      case 2: return {wrap(str_base(d - 1), kAtom) + (r_.chance(70) ? "[::-1]" : "[::2]"), kAtom};
      case 3: {
        Ex a = str_base(d - 1);
        Ex b = r_.chance(50) ? Ex{str_lit_code(), kAtom} : str_expr(d - 1);
        if (b.text == a.text) b = {str_lit_code(), kAtom};
        if (r_.chance(30)) std::swap(a, b);
        return {wrap(a, kAdd) + " + " + wrap(b, kAdd + 1), kAdd};
      }
      case 4: {
        std::string k = std::to_string(r_.range(1, 3));
        int form = r_.range(0, 2);
        std::string slice = form == 0 ? "[:" + k + "]" : form == 1 ? "[" + k + ":]" : "[-" + k + ":]";
        return {wrap(str_base(d - 1), kAtom) + slice, kAtom};
      }
      case 5: return {wrap(str_base(d - 1), kAtom) + ".replace(" + letter_lit() + ", " + str_lit_code() + ")", kAtom};
      case 6: return {"str(" + ensure_var(int_expr(d - 1), Ty::Int).text + ")", kAtom};
      case 7: return {"''.join(sorted(" + str_base(d - 1).text + "))", kAtom};
      case 8: return {wrap(var_or(Ty::Str, 0), kMul) + " * 2", kMul};
      default: {
        Ex a = str_base(d - 1), b = str_expr(d - 1);
        if (a.text == b.text) return a;
        return {wrap(a, kCond + 1) + " if " + cond(d - 1).text + " else " + wrap(b, kCond), kCond};
      }
    }
  }

  Ex list_base(int d) { return ensure_var(list_expr(d), Ty::List); }
  Ex list_expr(int d) {
    if (d <= 0) return var_or(Ty::List, 0);
    bool dicts = !vars(Ty::Dict).empty();
    std::vector<int> w = {25, 12, 8, 6, 6, 10, s_.comprehensions ? 14 : 0, s_.comprehensions ? 12 : 0, 4,
                          dicts ? 5 : 0};
    if (force_comp_ && s_.comprehensions && !vars(Ty::List).empty()) w = {0, 0, 0, 0, 0, 0, 1, 1, 0, 0};
    force_comp_ = false;
    switch (r_.weighted(w)) {
      case 0: return var_or(Ty::List, 0);
      case 1: {
        Ex a = list_base(d - 1);
        return {"sorted(" + a.text + (r_.chance(25) ? ", reverse=True)" : ")"), kAtom, a.nonempty};
      }
      case 2: {
        Ex a = list_base(d - 1);
        return {wrap(a, kAtom) + "[::-1]", kAtom, a.nonempty};
      }
      case 3: {
        Ex a = list_base(d - 1);
        return {wrap(a, kAtom) + "[:" + std::to_string(r_.range(1, 3)) + "]", kAtom, a.nonempty};
      }
      case 4: {
        Ex a = list_base(d - 1);
        return {wrap(a, kAtom) + "[1:]", kAtom, false};
      }
      case 5: {
        Ex a = list_base(d - 1);
        return {wrap(a, kAdd) + " + [" + int_expr(d - 1).text + "]", kAdd, true};
      }
      case 6: {  // map comprehension
        Ex src = list_base(d - 1);
        std::string v = comp_var();
        scope_.push_back({v, Ty::Int});
        Ex body = r_.chance(70) ? binop_with(v) : int_expr(1);
        scope_.pop_back();
        return {"[" + body.text + " for " + v + " in " + src.text + "]", kAtom, src.nonempty};
      }
      case 7: {  // filter comprehension
        Ex src = list_base(d - 1);
        std::string v = comp_var();
        scope_.push_back({v, Ty::Int});
        std::string body = r_.chance(60) ? v : binop_with(v).text;
        std::string c = cond_on(v);
        scope_.pop_back();
        return {"[" + body + " for " + v + " in " + src.text + " if " + c + "]", kAtom, false};
      }
      case 8: return {"list(range(" + std::to_string(r_.range(1, 5)) + "))", kAtom, true};
      default: {
        auto dv = vars(Ty::Dict);
        const Var* x = r_.pick(dv);
        return {"sorted(" + x->name + ".values())", kAtom, x->nonempty};
      }
    }
  }

  Ex dict_expr(int d) {
    auto strs = vars(Ty::Str);
    if (d > 0 && s_.comprehensions && !strs.empty() && r_.chance(40)) {
      std::string s = r_.pick(strs)->name;
      std::string v = fresh({"ch", "c2", "k2"});
      used_.erase(v);
      std::string val = r_.chance(50) ? s + ".count(" + v + ")" : "len(" + s + ")";
      return {"{" + v + ": " + val + " for " + v + " in " + s + "}", kAtom, false};
    }
    return var_or(Ty::Dict, 0);
  }

  std::string comp_var() {
    std::string v = fresh({"v", "e", "z", "x2", "n2"});
    used_.erase(v);  // comprehension scope: the name may be reused by another comprehension
    if (find(v)) v += "_";
    return v;
  }
  Ex binop_with(const std::string& v) {
    int k = r_.range(0, 3);
    std::string lit = std::to_string(small_pos());
    if (k == 0) return {v + " * " + lit, kMul};
    if (k == 1) return {v + " + " + lit, kAdd};
    if (k == 2) return {v + " % " + lit, kMul};
    return {v + " - " + wrap(int_expr(0), kAdd + 1), kAdd};
  }
  std::string cond_on(const std::string& v) {
    int k = r_.range(0, 3);
    if (k == 0) return v + " % 2 == " + std::to_string(r_.range(0, 1));
    if (k == 1) return v + " > " + std::to_string(r_.range(0, max_int() / 2));
    if (k == 2) return v + " < " + wrap(int_expr(1), kCmp + 1);
    return v + " != " + std::to_string(r_.range(0, max_int()));
  }

  Ex cond(int d) {
    auto strs = vars(Ty::Str);
    auto lists = vars(Ty::List);
    auto dicts = vars(Ty::Dict);
    std::vector<int> w = {40, 15, 10, strs.empty() ? 0 : 12, lists.empty() ? 0 : 8, strs.empty() ? 0 : 6,
                          dicts.empty() ? 0 : 6, (strs.empty() && lists.empty()) ? 0 : 8};
    int sub = std::max(0, std::min(d, 1));
    static const std::vector<std::string> kOps = {" < ", " > ", " <= ", " >= ", " == ", " != "};
    switch (r_.weighted(w)) {
      case 0: {
        Ex a = ensure_var(int_expr(sub), Ty::Int), b = int_expr(0);
        if (b.text == a.text) b = {std::to_string(r_.range(0, max_int())), kAtom};
        return {wrap(a, kCmp + 1) + r_.pick(kOps) + wrap(b, kCmp + 1), kCmp};
      }
      case 1: return {wrap(ensure_var(int_expr(sub), Ty::Int), kMul) + " % 2 == " + std::to_string(r_.range(0, 1)), kCmp};
      case 2: return {wrap(ensure_var(int_expr(sub), Ty::Int), kCmp + 1) + " > " + std::to_string(r_.range(0, max_int())), kCmp};
      case 3: return {letter_lit() + (r_.chance(75) ? " in " : " not in ") + r_.pick(strs)->name, kCmp};
      case 4: return {wrap(int_seed(), kCmp + 1) + " in " + r_.pick(lists)->name, kCmp};
      case 5: {
        const std::string& s = r_.pick(strs)->name;
        if (r_.chance(50)) return {s + ".startswith(" + letter_lit() + ")", kAtom};
        return {s + " == " + s + "[::-1]", kCmp};
      }
      case 6: return {letter_lit() + " in " + r_.pick(dicts)->name, kCmp};
      default: {
        std::vector<std::string> c;
        for (auto* v : strs) c.push_back(v->name);
        for (auto* v : lists) c.push_back(v->name);
        return {"len(" + r_.pick(c) + ") > " + std::to_string(r_.range(0, 3)), kCmp};
      }
    }
  }

  // ---- statements ----------------------------------------------------------------------------
  void emit(int depth, const std::string& line) { lines_.push_back(std::string(4 * (depth + 1), ' ') + line); }

  std::vector<Ty> enabled_types(bool with_dict) const {
    std::vector<Ty> t = {Ty::Int};
    if (s_.strings) t.push_back(Ty::Str);
    if (s_.lists) t.push_back(Ty::List);
    if (with_dict && s_.dicts) t.push_back(Ty::Dict);
    return t;
  }

  void assign_new(int depth) {
    Ty t = live_type(false);
    if (s_.comprehensions && !vars(Ty::List).empty() && r_.chance(50)) {
      t = Ty::List;
      force_comp_ = true;
    }
    Ex e = ensure_var(expr(t, 2), t);
    if (t == Ty::List && e.prec == kAtom && find(e.text)) e.text = "sorted(" + e.text + ")";  // never alias
    std::string name = fresh_for(t);
    emit(depth, name + " = " + e.text);
    scope_.push_back({name, t, e.nonempty, false});
    focus_ = name;
    if (depth == 0) top_focus_ = name;
  }

  // An update of an existing variable; false if none fits.
  bool update(int depth, const std::string& prefer = "") {
    std::vector<Var*> c;
    for (auto& v : scope_)
      if (!is_frozen(v.name) && !v.loopvar) c.push_back(&v);
    if (c.empty()) return false;
    Var* v = nullptr;
    if (!prefer.empty()) v = find(prefer);
    if (!v || is_frozen(v->name) || v->loopvar) v = c[static_cast<size_t>(r_.range(0, static_cast<int>(c.size()) - 1))];
    bool in_loop = loop_depth_ > 0;
    if (depth == 0) top_focus_ = v->name;
    prefer_.clear();
    switch (v->ty) {
      case Ty::Int: {
        int k = r_.range(0, 3);
        if (k <= 1) {
          Ex e = ensure_var(int_expr(in_loop ? 1 : 2), Ty::Int);
          if (e.text == v->name) e = {std::to_string(r_.range(1, max_int())), kAtom};
          emit(depth, v->name + (k == 0 ? " += " : " -= ") + e.text);
        } else if (k == 2 && !in_loop) {
          emit(depth, v->name + " = " + int_expr(2).text);
        } else {
          Ex e = ensure_var(int_expr(1), Ty::Int);
          if (e.text == v->name) e = {std::to_string(r_.range(1, max_int())), kAtom};
          emit(depth, v->name + " = " + (r_.chance(50) ? "max(" : "min(") + v->name + ", " + e.text + ")");
        }
        v->small = false;
        return true;
      }
      case Ty::Str: {
        if (in_loop) {
          std::vector<std::string> small;
          for (auto& x : scope_)
            if (x.ty == Ty::Str && x.chr) small.push_back(x.name);
          for (auto& x : scope_)
            if (x.ty == Ty::Int && x.small) small.push_back("str(" + x.name + ")");
          small.push_back(letter_lit());
          std::string a = small[static_cast<size_t>(r_.range(0, static_cast<int>(small.size()) - 1))];
          if (r_.chance(70)) {
            emit(depth, v->name + " += " + a);
          } else {
            emit(depth, v->name + " = " + a + " + " + v->name);
          }
        } else {
          prefer_ = v->name;
          std::string e = str_base(2).text;
          if (e == v->name) e = v->name + "[::-1]";
          emit(depth, v->name + " = " + e);
          prefer_.clear();
        }
        return true;
      }
      case Ty::List: {
        int k = r_.range(0, 3);
        if (in_loop || k <= 1) {
          emit(depth, v->name + ".append(" + int_expr(1).text + ")");
          v->nonempty = v->nonempty || depth == 0;
        } else if (k == 2) {
          emit(depth, v->name + (r_.chance(50) ? ".sort()" : ".reverse()"));
        } else {
          Ex e = list_expr(2);
          if (e.prec == kAtom && find(e.text)) e.text = "sorted(" + e.text + ")";
          emit(depth, v->name + " = " + e.text);
          v->nonempty = v->nonempty && e.nonempty;
        }
        return true;
      }
      case Ty::Dict: {
        std::string key;
        std::vector<std::string> keys;
        for (auto& x : scope_)
          if (x.ty == Ty::Str && x.chr) keys.push_back(x.name);
        key = (!keys.empty() && r_.chance(80)) ? r_.pick(keys) : letter_lit();
        if (r_.chance(70)) {
          emit(depth, v->name + "[" + key + "] = " + v->name + ".get(" + key + ", 0) + " +
                          (r_.chance(60) ? std::string("1") : wrap(int_expr(0), kAdd + 1)));
        } else {
          emit(depth, v->name + "[" + key + "] = " + int_expr(1).text);
        }
        v->nonempty = v->nonempty || depth == 0;
        return true;
      }
    }
    return false;
  }

  // Emits the body of a block (if/for) at `depth`: n statements, new names scoped to the block.
  void block(int depth, int n) {
    size_t saved = scope_.size();
    for (int i = 0; i < n; ++i) stmt(depth, i == 0 ? focus_ : "");
    scope_.resize(saved);
  }

  void loop(int depth) {
    std::vector<const Var*> lists;
    for (auto* v : vars(Ty::List))
      if (v->name != focus_ && (v->nonempty || r_.chance(30))) lists.push_back(v);
    std::vector<const Var*> strs;
    for (auto* v : vars(Ty::Str))
      if (v->name != focus_ && !v->chr) strs.push_back(v);
    auto dicts = vars(Ty::Dict);
    std::vector<int> w = {30, lists.empty() ? 0 : 35, strs.empty() ? 0 : 25, dicts.empty() ? 0 : 10};
    int kind = r_.weighted(w);
    std::string header;
    Var lv;
    std::string frozen;
    if (kind == 0) {
      std::string bound;
      auto smalls = vars(Ty::Int, false, true);
      int k = r_.range(0, 3);
      // The bound's variable is frozen for the body, as an iterated list is: `for i in range(b):
      // b += i * 2` inside another loop squares b at each outer pass (8 became 2**48 in four),
      // and the program's run time, hence whether it validates, hung on the machine's load.
      if (k == 0 && !smalls.empty()) {
        bound = r_.pick(smalls)->name;
        frozen = bound;
      } else if (k == 1 && (!lists.empty() || !strs.empty())) {
        std::vector<std::string> c;
        for (auto* v : lists) c.push_back(v->name);
        for (auto* v : strs) c.push_back(v->name);
        frozen = r_.pick(c);
        bound = "len(" + frozen + ")";
      } else {
        bound = std::to_string(r_.range(2, 5));
      }
      lv = {fresh({"i", "j", "idx"}), Ty::Int, false, true, false, true};
      header = "for " + lv.name + " in range(" + bound + "):";
    } else if (kind == 1) {
      const Var* xs = r_.pick(lists);
      lv = {fresh({"x", "v", "num", "e", "item"}), Ty::Int, false, false, false, true};
      frozen = xs->name;
      header = "for " + lv.name + " in " + xs->name + ":";
    } else if (kind == 2) {
      const Var* s = r_.pick(strs);
      lv = {fresh({"ch", "c2"}), Ty::Str, false, false, true, true};
      frozen = s->name;  // `t = 'c' + t` in the body doubled t at each pass of an outer loop
      header = "for " + lv.name + " in " + s->name + ":";
    } else {
      const Var* dv = r_.pick(dicts);
      lv = {fresh({"key", "kk"}), Ty::Str, false, false, true, true};
      header = "for " + lv.name + " in sorted(" + dv->name + "):";
    }
    emit(depth, header);
    if (!frozen.empty()) frozen_.push_back(frozen);
    ++loop_depth_;
    size_t saved = scope_.size();
    scope_.push_back(lv);
    block(depth + 1, body_len(depth + 1));
    scope_.resize(saved);
    --loop_depth_;
    if (!frozen.empty()) frozen_.pop_back();
  }

  int body_len(int depth) { return depth < s_.max_depth && r_.chance(25) ? 2 : 1; }

  void conditional(int depth) {
    std::string focus = focus_;
    emit(depth, "if " + cond(1).text + ":");
    if (r_.chance(25) && depth == 0) {
      Ty t = live_type(true);
      emit(depth + 1, "return " + ensure_var(expr(t, 1), t).text);
    } else {
      block(depth + 1, r_.chance(20) ? 2 : 1);
      if (r_.chance(55)) {
        emit(depth, "else:");
        focus_ = focus;
        block(depth + 1, 1);
      }
    }
    focus_ = focus;
  }

  void stmt(int depth, const std::string& prefer) {
    bool can_nest = depth < s_.max_depth;
    // 0 assign new, 1 update, 2 loop, 3 if
    std::vector<int> w = {depth == 0 ? 30 : 10, depth == 0 ? 15 : 50, (can_nest && s_.loops) ? 25 : 0,
                          (can_nest && s_.conditionals) ? 20 : 0};
    if (!prefer.empty() && depth > 0 && r_.chance(80)) {
      if (update(depth, prefer)) return;
    }
    switch (r_.weighted(w)) {
      case 0: assign_new(depth); return;
      case 1:
        if (!update(depth)) assign_new(depth);
        return;
      case 2: loop(depth); return;
      default: conditional(depth); return;
    }
  }

  // A loop with its accumulator: `acc = 0` then a loop whose body updates it.
  void accumulator_loop(int depth) {
    std::vector<Ty> t = {Ty::Int, Ty::Int};
    if (s_.lists) t.push_back(Ty::List);
    if (s_.strings) t.push_back(Ty::Str);
    if (s_.dicts && s_.strings) t.push_back(Ty::Dict);
    Ty ty = r_.pick(t);
    std::string name = fresh_for(ty);
    const char* init = ty == Ty::Int ? (r_.chance(80) ? "0" : "1") : ty == Ty::Str ? "''" : ty == Ty::List ? "[]" : "{}";
    emit(depth, name + " = " + init);
    scope_.push_back({name, ty, false, false});
    focus_ = name;
    loop(depth);
    focus_ = name;
    top_focus_ = name;
  }

  GeneratedProgram one() {
    scope_.clear();
    scope_.reserve(256);  // Var pointers stay valid while expressions push comprehension variables
    used_.clear();
    frozen_.clear();
    lines_.clear();
    loop_depth_ = 0;
    focus_.clear();
    top_focus_.clear();
    prefer_.clear();
    GeneratedProgram p;
    int n_params = r_.range(std::max(1, s_.min_params), std::max(std::max(1, s_.min_params), s_.max_params));
    std::vector<Ty> types = enabled_types(true);
    for (int i = 0; i < n_params; ++i) {
      Ty t = (i == 0 || r_.chance(60)) ? r_.pick(types) : Ty::Int;
      std::string name;
      switch (t) {
        case Ty::Int: name = fresh({"x", "y", "n", "k", "a", "b"}); break;
        case Ty::Str: name = fresh({"s", "t", "text", "word"}); break;
        case Ty::List: name = fresh({"xs", "nums", "arr", "vals"}); break;
        case Ty::Dict: name = fresh({"d", "counts", "scores", "m"}); break;
      }
      scope_.push_back({name, t, true, t == Ty::Int});
      p.params.push_back(name);
      p.param_types.push_back(ty_name(t));
    }
    int n_stmts = r_.range(std::max(0, s_.min_statements), std::max(s_.min_statements, s_.max_statements));
    for (int i = 0; i < n_stmts;) {
      bool can_loop = s_.loops && s_.max_depth >= 1;
      if (can_loop && n_stmts - i >= 2 && r_.chance(35)) {
        accumulator_loop(0);
        i += 2;
      } else {
        stmt(0, "");
        ++i;
      }
    }
    // The return: usually the focus variable (the last thing computed), sometimes an expression.
    std::string ret;
    Var* f = top_focus_.empty() ? nullptr : find(top_focus_);
    int k = r_.range(0, 9);
    if (f && k < 5) {
      ret = f->name;
    } else if (f && k < 8) {
      prefer_ = f->name;
      Ty t = r_.chance(70) ? f->ty : Ty::Int;
      ret = ensure_var(expr(t, 1), t).text;
      prefer_.clear();
    } else if (k == 8 && scope_.size() >= 2) {
      Ty a = live_type(false), b = live_type(false);
      Ex x = ensure_var(expr(a, 1), a), y = ensure_var(expr(b, 1), b);
      ret = x.text == y.text ? x.text : x.text + ", " + y.text;
    } else {
      Ty t = live_type(true);
      ret = ensure_var(expr(t, 2), t).text;
    }
    emit(0, "return " + ret);
    std::string sig;
    for (size_t i = 0; i < p.params.size(); ++i) sig += (i ? ", " : "") + p.params[i];
    p.program = "def f(" + sig + "):\n";
    for (size_t i = 0; i < lines_.size(); ++i) p.program += lines_[i] + (i + 1 < lines_.size() ? "\n" : "");
    return p;
  }

  static bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
  static bool uses(const std::string& body, const std::string& name) {
    for (size_t pos = body.find(name); pos != std::string::npos; pos = body.find(name, pos + 1)) {
      bool left = pos == 0 || !is_ident_char(body[pos - 1]);
      bool right = pos + name.size() >= body.size() || !is_ident_char(body[pos + name.size()]);
      bool quoted = pos > 0 && body[pos - 1] == '\'';
      if (left && right && !quoted) return true;
    }
    return false;
  }
  static bool all_params_used(const GeneratedProgram& p) {
    std::string body = p.program.substr(p.program.find('\n'));
    for (const auto& n : p.params)
      if (!uses(body, n)) return false;
    return true;
  }

  // ---- inputs --------------------------------------------------------------------------------
  std::string value_literal(const std::string& type) {
    if (type == "int") return std::to_string(int_value());
    if (type == "str") {
      int n = r_.chance(10) ? 0 : r_.range(1, std::max(1, s_.max_str_len));
      std::string s;
      for (int i = 0; i < n; ++i) s += kInputAlphabet[r_.range(0, 4)];
      return "'" + s + "'";
    }
    if (type == "list") {
      int n = r_.range(1, std::max(1, s_.max_list_len));
      std::string s = "[";
      for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(int_value());
      return s + "]";
    }
    int n = r_.range(1, 3);
    std::vector<std::string> keys;
    std::string s = "{";
    for (int i = 0; i < n; ++i) {
      std::string key(1, kInputAlphabet[r_.range(0, 4)]);
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      keys.push_back(key);
      s += (keys.size() > 1 ? ", '" : "'") + key + "': " + std::to_string(r_.range(0, max_int()));
    }
    return s + "}";
  }
  std::vector<std::string> inputs_for(const GeneratedProgram& p, int n) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
      std::string a;
      for (int tries = 0; tries < 20; ++tries) {
        a.clear();
        for (size_t j = 0; j < p.param_types.size(); ++j) a += (j ? ", " : "") + value_literal(p.param_types[j]);
        if (std::find(out.begin(), out.end(), a) == out.end()) break;
      }
      out.push_back(a);
    }
    return out;
  }
};

}  // namespace

GenSettings preset(int level) {
  GenSettings s;
  if (level <= 0) {
    s.min_statements = 1;
    s.max_statements = 2;
    s.max_depth = 1;
    s.max_params = 2;
    s.lists = true;
    s.comprehensions = false;
  } else if (level >= 2) {
    s.min_statements = 2;
    s.max_statements = 5;
    s.max_depth = 2;
    s.max_int = 20;
    s.max_list_len = 6;
    s.max_str_len = 7;
    s.dicts = true;
  }
  return s;
}

GeneratedProgram generate_program(uint64_t seed, const GenSettings& s, int n_inputs) {
  return Generator(seed, s).program(std::max(0, n_inputs));
}

std::string induction_message(const GeneratedProgram& p, uint64_t seed) {
  Rng r(seed * 0x2545F4914F6CDD1Dull + 7);
  auto noun = [](const std::string& t) -> std::string {
    if (t == "int") return "an integer";
    if (t == "str") return "a string";
    if (t == "list") return "a list of integers";
    return "a dict from strings to integers";
  };
  std::string takes;
  for (size_t i = 0; i < p.param_types.size(); ++i) {
    if (i) takes += (i + 1 == p.param_types.size()) ? " and " : ", ";
    takes += noun(p.param_types[i]);
  }
  static const std::vector<std::string> kTails = {
      "Look at how the output depends on the input.", "Find the rule that maps the inputs to the output.",
      "Work out what it computes from the examples.", "Compare the outputs for similar inputs."};
  return "f takes " + takes + ". " + r.pick(kTails);
}

std::vector<buffer::Task> generate_tasks(sandbox::Pool& pool, buffer::TaskType type, int count, uint64_t seed,
                                         const GenSettings& s, TaskGenReport* report, int induction_inputs,
                                         int max_attempts) {
  TaskGenReport local;
  TaskGenReport& rep = report ? *report : local;
  std::vector<buffer::Task> tasks;
  if (count <= 0) return tasks;
  int64_t limit = max_attempts > 0 ? max_attempts : 20ll * count;
  bool induction = type == buffer::TaskType::Induction;
  int n_inputs = induction ? std::max(1, induction_inputs) : 1;
  proposer::ValidateSettings vs;
  vs.max_output_chars = s.max_output_chars;
  vs.induction_inputs = static_cast<size_t>(n_inputs);
  std::set<std::string> seen;
  uint64_t next = seed;
  int64_t tried = 0;
  while (static_cast<int>(tasks.size()) < count && tried < limit) {
    // A batch a bit larger than what is missing keeps every worker busy; tasks are taken in seed
    // order, so the result does not depend on the batch size.
    int64_t missing = count - static_cast<int64_t>(tasks.size());
    int64_t batch = std::min<int64_t>(limit - tried, std::max<int64_t>(16, missing + missing / 2));
    std::vector<proposer::Proposal> props;
    std::vector<GeneratedProgram> progs;
    std::vector<uint64_t> seeds;
    for (int64_t i = 0; i < batch; ++i, ++next) {
      GeneratedProgram g = generate_program(next, s, n_inputs);
      proposer::Proposal p;
      p.type = type;
      p.program = g.program;
      if (induction) {
        p.inputs = g.inputs;
        p.message = induction_message(g, next);
      } else {
        p.input = g.inputs.at(0);
      }
      props.push_back(std::move(p));
      progs.push_back(std::move(g));
      seeds.push_back(next);
    }
    auto results = proposer::validate(pool, props, vs);
    for (size_t i = 0; i < results.size() && static_cast<int>(tasks.size()) < count; ++i) {
      ++tried;
      ++rep.attempted;
      auto& res = results[i];
      if (!res.check.ok) {
        ++rep.rejected[res.check.reason];
        continue;
      }
      buffer::Task t = std::move(res.task);
      if (induction && std::all_of(t.outputs.begin(), t.outputs.end(),
                                   [&](const std::string& o) { return o == t.outputs.front(); })) {
        ++rep.rejected["constant_output"];
        continue;
      }
      std::string key = buffer::fingerprint(t);
      if (!seen.insert(key).second) {
        ++rep.rejected["duplicate"];
        continue;
      }
      t.origin = buffer::Origin::Seed;
      t.step = 0;
      ++rep.valid;
      tasks.push_back(std::move(t));
    }
  }
  return tasks;
}

std::vector<buffer::Task> without_programs_of(std::vector<buffer::Task> tasks, const std::vector<buffer::Task>& others,
                                              int64_t limit) {
  std::set<std::string_view> programs;
  for (const buffer::Task& t : others) programs.insert(t.program);
  std::vector<buffer::Task> kept;
  for (buffer::Task& t : tasks) {
    if (limit >= 0 && static_cast<int64_t>(kept.size()) >= limit) break;
    if (!programs.count(t.program)) kept.push_back(std::move(t));
  }
  return kept;
}

}  // namespace azr::bootstrap
