#pragma once
// A text-level scan of a program's import statements for banned modules (azr-reference §4.2).
//
// The reference checks import statements through Python's AST: `import a.b` is banned when any
// dotted component equals a banned word; `from m import n` when a component of m or of n does.
// This is the trainer-side fast pre-filter; the sandbox-side validator (proposer/validate.*)
// runs the authoritative AST check in the sandbox. The scan lexes just enough Python to be
// right on real code: string literals and comments are skipped, bracketed and backslash
// continuations are joined, `;` and compound-statement colons (`try: import os`) separate
// statements, and imports at any indentation (inside functions) count.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace azr::proposer {

struct BannedImport {
  std::string module;  // the dotted name as written ("os.path", "random", "." + "time")
  std::string word;    // the banned word it matched
};

// The first banned import in `program`, or nullopt.
// azr decision: `__import__` and `importlib` anywhere in the code (outside strings and comments)
// also count as banned imports — they are the obvious bypass of an import-statement check, and
// the reference does not close it.
std::optional<BannedImport> find_banned_import(std::string_view program,
                                               const std::vector<std::string>& banned_words);

}  // namespace azr::proposer
