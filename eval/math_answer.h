#pragma once
// Math answer grading for `azr eval`: pull the final answer out of a model response and decide
// whether it is the same as a benchmark's gold answer.
//
// Equivalence rules (math_equivalent), applied to both sides after the same normalisation:
//  * Cosmetic LaTeX is dropped: $...$, \[ \], \left/\right, spacing (\! \, \; \: ~ \quad),
//    \displaystyle, \dfrac/\tfrac (-> \frac), \boxed{..} wrappers, whitespace.
//  * Decorations are dropped: degrees (^\circ, ^{\circ}, °, \degree), percent (\%, %), dollars
//    (\$), units (\text{ cm}, \mbox{ inches}, \mathrm{~m} after a value, or a plain trailing word
//    after a number: "5 cm"), so `50\%` = `50`. DECISION: `0.5` != `50\%` (the percent sign is
//    dropped, not divided by 100), since MATH-style golds write percentages as the number.
//  * \text{X} / \mbox{X} / \mathrm{X} / \textbf{X} standing alone are unwrapped: `\text{(B)}` = `B`;
//    single letters (multiple choice) compare case-insensitively; `(B)` = `B`.
//  * `v = rhs` with a single variable on the left compares as `rhs` (`x = 5` = `5`).
//  * A number written with thousands separators (`1,000`, `10,\!080`: groups of exactly three
//    digits, no space after the comma) is one number; `1, 000` or `(1, 0)` are lists.
//  * Brackets: `(a, b)`, `[a, b]`, `(a, b]` compare element-wise and the bracket kinds must match
//    (so intervals and tuples keep their meaning); `\{a, b\}` sets and bare comma lists `a, b`
//    (lists of solutions) compare as unordered multisets; a set and a bare list may match.
//  * `a \pm b` is the list `a+b, a-b`.
//  * Scalars are evaluated by a small recursive-descent parser (numbers, e-notation `4.5e33`,
//    + - * / ^, \frac, \sqrt,
//    \sqrt[n], \pi, \cdot, \times, implicit products like 2\sqrt{3} or 3\pi, mixed numbers
//    1\frac{4}{5}); two integer values compare exactly, others with relative tolerance 1e-6
//    (so `\frac{1}{3}` != `0.33`, `\pi/2` != `1.57`, `2\sqrt3` != `\sqrt6`, `0.5` = `\frac12`).
//  * Expressions in single-letter variables and Greek letters (`\omega`; `\pi` is the constant)
//    compare as functions (`p-q` = `-q+p`, `2(n-1)` = `2n-2`, `\frac{x}{2}` = `0.5x`,
//    `2\pi/\omega` = `\frac{2\pi}{\omega}`), as Qwen2.5-Math's math_equal asks sympy: both sides are
//    evaluated at 8 fixed pseudo-random points, variables in [1.1, 3.1], and must agree at every
//    point where both have a value (4 at least). A run of letters is a word, not a product
//    (`odd`), and functions (\sin, \log) are not parsed.
//  * Anything the parser cannot evaluate (functions, matrices, unions) falls back to equality of
//    the normalised strings.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace azr::eval {

// The final answer a response gives: the content of the LAST \boxed{...} (or \fbox{...}) with
// balanced braces; else the text inside the last <answer>...</answer> (and, inside it, a \boxed if
// present); else the last number in the text. nullopt if none.
std::optional<std::string> extract_math_answer(std::string_view response);

// Whether two final answers are mathematically the same (candidate vs gold), after normalisation.
bool math_equivalent(std::string_view candidate, std::string_view gold);

// The normalised form both sides are compared in (exposed for tests and debugging), as a gold
// is normalised: a lone trailing letter stays (`2 n`); a candidate's goes when the gold has no
// variable, no letter outside a command (`5 m` against 5 or `\frac{1}{2}`).
std::string normalize_math_answer(std::string_view answer);

// The gold answer of a benchmark item as a string. `benchmark` is the folder name under
// benchmarks/: gsm8k (after "#### ", commas removed), minerva_math (last \boxed of `solution`),
// olympiadbench (`final_answer` list joined by ",", `$` stripped), amc23 (float `answer`, written
// as an integer when it is one), math500/aime24/aime25 and others (`answer`). nullopt if absent.
std::optional<std::string> gold_math_answer(std::string_view benchmark, const nlohmann::json& item);

}  // namespace azr::eval
