#include "proposer/import_scan.h"

#include <algorithm>
#include <cctype>

namespace azr::proposer {
namespace {

// A token of the simplified Python lexer: a name, one punctuation character, or a string.
struct Token {
  enum Kind { Name, Punct, String } kind;
  std::string text;
};
using Statement = std::vector<Token>;

bool is_name_start(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool is_name_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

// Index just past the string literal whose opening quote is at `q` (prefix already consumed).
size_t skip_string(std::string_view s, size_t q) {
  const char quote = s[q];
  const bool triple = s.substr(q, 3) == std::string(3, quote);
  size_t i = q + (triple ? 3 : 1);
  while (i < s.size()) {
    if (s[i] == '\\') {  // escapes the next character, raw strings included (lexically)
      i += 2;
      continue;
    }
    if (triple) {
      if (s.substr(i, 3) == std::string(3, quote)) return i + 3;
    } else {
      if (s[i] == quote) return i + 1;
      if (s[i] == '\n') return i;  // unterminated single-quoted string: stop at the line end
    }
    ++i;
  }
  return s.size();
}

// Splits the program into logical statements: a newline ends one only outside brackets and
// not after a backslash; `;` and a colon outside brackets also end one (so the body of
// `if x: import os` is its own statement). Comments are dropped; strings become one token.
std::vector<Statement> statements(std::string_view s) {
  std::vector<Statement> out(1);
  int depth = 0;
  auto end_statement = [&] {
    if (!out.back().empty()) out.emplace_back();
  };
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (c == '\\' && i + 1 < s.size() && s[i + 1] == '\n') {
      i += 2;  // explicit line continuation
    } else if (c == '\n') {
      if (depth == 0) end_statement();
      ++i;
    } else if (c == '"' || c == '\'') {
      size_t e = skip_string(s, i);
      out.back().push_back({Token::String, std::string(s.substr(i, e - i))});
      i = e;
    } else if (is_name_start(c)) {
      size_t e = i;
      while (e < s.size() && is_name_char(s[e])) ++e;
      // A string prefix (r, b, f, u, rb, …) directly before a quote belongs to the string.
      if (e < s.size() && (s[e] == '"' || s[e] == '\'') && e - i <= 2) {
        size_t se = skip_string(s, e);
        out.back().push_back({Token::String, std::string(s.substr(i, se - i))});
        i = se;
        continue;
      }
      out.back().push_back({Token::Name, std::string(s.substr(i, e - i))});
      i = e;
    } else if (std::isspace(c)) {
      ++i;
    } else {
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
      if ((c == ';' || c == ':') && depth == 0) {
        end_statement();
      } else {
        out.back().push_back({Token::Punct, std::string(1, static_cast<char>(c))});
      }
      ++i;
    }
  }
  return out;
}

bool is(const Token& t, Token::Kind k, std::string_view text) { return t.kind == k && t.text == text; }

// Reads a dotted name starting at `i` ("a", "a.b.c"); leading dots of a relative import are
// kept ("..pkg"). Advances `i` past it.
std::string dotted_name(const Statement& st, size_t& i) {
  std::string name;
  while (i < st.size()) {
    if (is(st[i], Token::Punct, ".")) {
      name += '.';
    } else if (st[i].kind == Token::Name && (name.empty() || name.back() == '.') && st[i].text != "import") {
      name += st[i].text;
    } else {
      break;
    }
    ++i;
  }
  return name;
}

// The dotted names a statement imports: for `import a.b as c, d` → {a.b, d}; for
// `from m import (x as y, z)` → {m, x, z}. Aliases are not checked (the AST check reads
// alias.name, not asname). Anything else → {}.
std::vector<std::string> imported_names(const Statement& st) {
  std::vector<std::string> out;
  if (st.empty() || st[0].kind != Token::Name) return out;
  size_t i = 1;
  auto name_list = [&] {
    while (i < st.size()) {
      if (st[i].kind == Token::Punct && (st[i].text == "(" || st[i].text == ")" || st[i].text == ",")) {
        ++i;
        continue;
      }
      std::string n = dotted_name(st, i);
      if (n.empty()) {
        ++i;  // `*` or something unexpected: skip it
        continue;
      }
      out.push_back(n);
      if (i < st.size() && is(st[i], Token::Name, "as")) i += 2;  // skip the alias
    }
  };
  if (st[0].text == "import") {
    name_list();
  } else if (st[0].text == "from") {
    std::string module = dotted_name(st, i);
    if (!module.empty()) out.push_back(module);
    if (i < st.size() && is(st[i], Token::Name, "import")) {
      ++i;
      name_list();
    }
  }
  return out;
}

std::vector<std::string> components(std::string_view dotted) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= dotted.size()) {
    size_t e = dotted.find('.', b);
    if (e == std::string_view::npos) e = dotted.size();
    if (e > b) out.emplace_back(dotted.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

}  // namespace

std::optional<BannedImport> find_banned_import(std::string_view program,
                                               const std::vector<std::string>& banned_words) {
  auto banned = [&](const std::string& w) {
    return std::find(banned_words.begin(), banned_words.end(), w) != banned_words.end();
  };
  for (const Statement& st : statements(program)) {
    for (const Token& t : st)  // azr decision: the dynamic-import bypass (see the header)
      if (t.kind == Token::Name && (t.text == "__import__" || t.text == "importlib"))
        return BannedImport{t.text, t.text};
    for (const std::string& name : imported_names(st))
      for (const std::string& part : components(name))
        if (banned(part)) return BannedImport{name, part};
  }
  return std::nullopt;
}

}  // namespace azr::proposer
