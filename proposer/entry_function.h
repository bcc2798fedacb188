#pragma once
// The entry-function rules of azr-reference §4.1: a proposed program must contain exactly one
// `def`, and that function is renamed to `f`.
#include <string>
#include <string_view>
#include <vector>

namespace azr::proposer {

// Names of every `def`, in order, found by the reference's regex `^\s*def\s+(\w+)\s*\(` in
// MULTILINE mode — nested functions and class methods count too (§4.1), as does a `def` line
// inside a string literal (the reference's regex does not know about strings either).
std::vector<std::string> def_names(std::string_view program);

// §4.1 (`f_replace_location=not_first`): rewrite `def name(` to `def f(` and every call `name(`
// to `f(`. The call pattern has a word boundary, so `xname(` stays; like the reference's regex
// it also renames `obj.name(` and `name(` inside strings. No-op when name == "f".
std::string rename_to_f(std::string_view program, std::string_view name);

}  // namespace azr::proposer
