#include "eval/evalplus_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "eval/json_python.h"

namespace azr::eval {
namespace {

using detail::JsonCursor;

// A JSON value on its way to Python source. Containers keep their parts, so a conversion can make
// a list a tuple; a scalar is its Python literal already, and keeps its JSON text for float(...)
// and complex(...), which read a string's content.
struct Node {
  enum class Kind { List, Tuple, Dict, Scalar } kind = Kind::Scalar;
  std::vector<Node> items;        // List, Tuple; Dict: the values
  std::vector<std::string> keys;  // Dict: the keys, as Python string literals
  std::string python;             // Scalar
  std::string json;               // Scalar
};
using Kind = Node::Kind;

Node read(JsonCursor& c) {
  Node n;
  const char open = c.peek();
  if (open == '[' || open == '{') {
    n.kind = open == '[' ? Kind::List : Kind::Dict;
    const char close = open == '[' ? ']' : '}';
    ++c.i;
    for (bool first = true; c.peek() != close; first = false) {
      if (!first) c.expect(',');
      if (n.kind == Kind::Dict) {
        n.keys.emplace_back();
        c.string_to_python(n.keys.back());
        c.expect(':');
      }
      n.items.push_back(read(c));
    }
    ++c.i;
    return n;
  }
  const size_t start = c.i;
  bool nan = false;
  c.value_to_python(n.python, &nan);
  if (nan) throw std::runtime_error("json: NaN in an argument list is not supported");
  n.json = std::string(c.s.substr(start, c.i - start));
  return n;
}

void render(const Node& n, std::string& out) {
  if (n.kind == Kind::Scalar) {
    out += n.python;
    return;
  }
  out += n.kind == Kind::List ? '[' : n.kind == Kind::Tuple ? '(' : '{';
  for (size_t k = 0; k < n.items.size(); ++k) {
    if (k) out += ", ";
    if (n.kind == Kind::Dict) out += n.keys[k] + ": ";
    render(n.items[k], out);
  }
  if (n.kind == Kind::Tuple && n.items.size() == 1) out += ',';
  out += n.kind == Kind::List ? ']' : n.kind == Kind::Tuple ? ')' : '}';
}

[[noreturn]] void misfit(const std::string& what) { throw std::runtime_error("argument list: " + what); }

// EvalPlus's tuple(lst): every converted argument is a JSON array in the files.
Node tuple_of(Node n) {
  if (n.kind != Kind::List) misfit("tuple(...) of an argument that is not a list");
  n.kind = Kind::Tuple;
  return n;
}

Node tuples_all_the_way_down(Node n) {
  if (n.kind != Kind::List) return n;
  for (Node& item : n.items) item = tuples_all_the_way_down(std::move(item));
  n.kind = Kind::Tuple;
  return n;
}

// The text float(...) and complex(...) read: a JSON string's content, or a number's digits.
std::string scalar_text(const Node& n) {
  if (n.kind != Kind::Scalar) misfit("float(...) or complex(...) of a container");
  if (n.json.empty() || n.json[0] != '"') return n.json;
  return nlohmann::json::parse(n.json).get<std::string>();
}

double parse_float(std::string s) {
  s.erase(0, s.find_first_not_of(" \t\n"));
  s.erase(s.find_last_not_of(" \t\n") + 1);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || std::isnan(v)) misfit("'" + s + "' is not a number float() reads here");
  return v;
}

Node float_of(const Node& n) {
  Node f;
  f.python = python_float(parse_float(scalar_text(n)));
  return f;
}

// complex("1j"), complex("(1+2j)"), complex("0"), complex(4): Python's complex() grammar without
// its whitespace and underscore niceties, which the files do not use.
Node complex_of(const Node& n) {
  std::string s = scalar_text(n);
  if (s.size() >= 2 && s.front() == '(' && s.back() == ')') s = s.substr(1, s.size() - 2);
  double re = 0, im = 0;
  if (!s.empty() && (s.back() == 'j' || s.back() == 'J')) {
    s.pop_back();
    size_t split = std::string::npos;  // the sign that starts the imaginary part
    for (size_t k = 1; k < s.size(); ++k)
      if ((s[k] == '+' || s[k] == '-') && s[k - 1] != 'e' && s[k - 1] != 'E') split = k;
    std::string imag = split == std::string::npos ? s : s.substr(split);
    if (split != std::string::npos) re = parse_float(s.substr(0, split));
    im = imag.empty() || imag == "+" ? 1 : imag == "-" ? -1 : parse_float(imag);
  } else {
    re = parse_float(s);
  }
  Node c;
  c.python = "(" + python_float(re) + (std::signbit(im) ? "-" + python_float(-im) : "+" + python_float(im)) + "j)";
  return c;
}

bool one_of(int id, std::initializer_list<int> ids) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

// EvalPlus's conversions, by task number. Its function also names Mbpp/115 (lists to sets) and
// Mbpp/307, which MbppPlus v0.2.0 no longer has; they are left out.
std::vector<Node> convert(int id, std::vector<Node> args) {
  auto at_least = [&](size_t n) {
    if (args.size() < n) misfit("Mbpp/" + std::to_string(id) + " takes " + std::to_string(n) + " arguments or more");
  };
  auto each_item_tuple = [](Node list) {
    if (list.kind != Kind::List) misfit("a list of lists expected");
    for (Node& item : list.items) item = tuple_of(std::move(item));
    return list;
  };
  if (one_of(id, {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740,
                  744, 809})) {
    for (Node& a : args) a = tuple_of(std::move(a));
  } else if (one_of(id, {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780})) {
    for (Node& a : args) a = each_item_tuple(std::move(a));
  } else if (one_of(id, {75, 413, 444, 753})) {
    at_least(2);
    args = {each_item_tuple(std::move(args[0])), std::move(args[1])};
  } else if (id == 106 || id == 750) {
    at_least(2);
    args = {std::move(args[0]), tuple_of(std::move(args[1]))};
  } else if (id == 124) {
    at_least(2);
    args = {float_of(args[0]), complex_of(args[1])};
  } else if (one_of(id, {250, 405, 446, 617, 720, 763, 808})) {
    at_least(2);
    args = {tuple_of(std::move(args[0])), std::move(args[1])};
  } else if (one_of(id, {259, 401, 445})) {
    for (Node& a : args) a = tuple_of(each_item_tuple(std::move(a)));
  } else if (id == 278) {
    at_least(1);
    Node first = std::move(args[0]);
    if (first.kind != Kind::List) misfit("Mbpp/278's argument is not a list");
    for (Node& item : first.items)
      if (item.kind == Kind::List) item.kind = Kind::Tuple;
    args = {tuple_of(std::move(first))};
  } else if (id == 722) {
    at_least(1);
    if (args[0].kind != Kind::Dict) misfit("Mbpp/722's first argument is not a dict");
    for (Node& value : args[0].items) value = tuple_of(std::move(value));
  } else if (id == 252) {
    at_least(1);
    args = {complex_of(args[0])};
  } else if (one_of(id, {580, 615, 791})) {
    for (Node& a : args) a = tuples_all_the_way_down(std::move(a));
  }
  return args;
}

// "Mbpp/123" -> 123; anything else -> -1 (no conversion).
int mbpp_number(std::string_view task_id) {
  constexpr std::string_view prefix = "Mbpp/";
  if (task_id.substr(0, prefix.size()) != prefix) return -1;
  const std::string digits(task_id.substr(prefix.size()));
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(digits);
}

}  // namespace

std::string python_float(double v) {
  if (std::isinf(v)) return v > 0 ? "1e999" : "-1e999";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::vector<std::string> evalplus_argument_lists(std::string_view raw, std::string_view task_id) {
  const int mbpp = mbpp_number(task_id);
  std::vector<std::string> out;
  JsonCursor c{raw};
  if (c.peek() == '{') {
    ++c.i;
    c.expect('}');
    return out;
  }
  Node inputs = read(c);
  c.ws();
  if (c.i != raw.size()) c.fail("trailing characters");
  if (inputs.kind != Kind::List) c.fail("expected an array of argument arrays");
  for (size_t k = 0; k < inputs.items.size(); ++k) {
    Node& input = inputs.items[k];
    if (input.kind != Kind::List) c.fail("input " + std::to_string(k) + " is not an array of arguments");
    std::vector<Node> args = std::move(input.items);
    if (mbpp >= 0) {
      try {
        args = convert(mbpp, std::move(args));
      } catch (const std::runtime_error& e) {
        throw std::runtime_error(std::string(task_id) + " input " + std::to_string(k) + ": " + e.what());
      }
    }
    std::string text;
    for (size_t a = 0; a < args.size(); ++a) {
      if (a) text += ", ";
      render(args[a], text);
    }
    out.push_back(std::move(text));
  }
  return out;
}

}  // namespace azr::eval
