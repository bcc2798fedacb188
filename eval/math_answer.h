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
//    single letters (multiple choice) and words (letters only) compare case-insensitively
//    (`\text{East}` = `east`, as Qwen2.5-Math's grader lowercases; `q-Q` != `Q-q`); `(B)` = `B`.
//  * `v = rhs` with a single variable on the left compares as `rhs` (`x = 5` = `5`). Other
//    equations are equal when lhs - rhs is the same function, or its negation (Qwen2.5-Math's
//    grader): `5x+11z-7y=-4` = `5x - 7y + 11z + 4 = 0`; a multiple of it is not.
//  * A number written with thousands separators (`1,000`, `10,\!080`: groups of exactly three
//    digits, no space after the comma unless `\!` marks it: `11,\! 111`) is one number;
//    `1, 000` or `(1, 0)` are lists.
//  * Brackets: `(a, b)`, `[a, b]`, `(a, b]` compare element-wise and the bracket kinds must match
//    (so intervals and tuples keep their meaning); `\{a, b\}` sets and bare comma lists `a, b`
//    (lists of solutions) compare as unordered multisets; a set and a bare list may match; a
//    tuple `(a, b)` and the bare `a, b` match in order (Qwen2.5-Math's grader strips brackets).
//    DECISION: an open interval `(a, b)` looks the same and matches the bare list too, as there,
//    unless the answer says it is one (an `\infty` end, `x \in`) or the list is a `\pm` expanded.
//  * `a \pm b` outside brackets is the list `a+b, a-b`, and an element `a \pm b` of a set or list
//    is two (`\pmod` is no `\pm`).
//  * Scalars are evaluated by a small recursive-descent parser (numbers, e-notation `4.5e33`,
//    + - * / ^, \frac, \sqrt,
//    \sqrt[n], \pi, \cdot, \times, implicit products like 2\sqrt{3} or 3\pi, mixed numbers
//    1\frac{4}{5}); two integer values compare exactly, others with relative tolerance 1e-6
//    (so `\frac{1}{3}` != `0.33`, `\pi/2` != `1.57`, `2\sqrt3` != `\sqrt6`, `0.5` = `\frac12`).
//    Each value carries a bound on its rounding error, and two values within their bounds of each
//    other are equal: `\sin\pi` (1.2e-16 in doubles) is 0, as sympy's exact arithmetic has it,
//    and so is `\sin 2x - 2\sin x\cos x` at every point. A value whose bound exceeds 1e-9 of it
//    (or 1e-9 below 1) has none: a pole (`\tan\frac{\pi}{2}`), or the arcsine of a sine that
//    rounded to 1 (`\arcsin(\sin\frac{\pi}{2})`, which sympy evaluates), or `\sqrt{\sin\pi}`.
//  * Expressions in single-letter variables, Greek letters (`\omega`; `\pi` is the constant) and
//    subscripted variables (`x_0`, `\omega_{n}`, `E_{12}`: each a variable of its own; a number's
//    subscript, `52_8` or `1A_{16}`, stays text) compare as functions (`p-q` = `-q+p`, `2(n-1)` = `2n-2`,
//    `\frac{x}{2}` = `0.5x`, `2\pi/\omega` = `\frac{2\pi}{\omega}`), as Qwen2.5-Math's math_equal asks
//    sympy: both sides are evaluated at 8 fixed pseudo-random points, variables in [1.1, 3.1], and
//    must agree at every point where both have a value (4 at least; else 8 more points in
//    [-0.95, 0.95], where `\sqrt{1-\zeta^2}` has one). A run of letters is a word, not a product
//    (`odd`; so `2RC` is text, where sympy reads R*C).
//  * Functions, as sympy's LaTeX parser reads them: \sin \cos \tan \sec \csc \cot, \sinh \cosh
//    \tanh, their inverses (\arcsin, or `\sin^{-1}`, `\sinh^{-1}`), \coth \sech \csch, \exp, \ln
//    and \log (decimal, as sympy reads it; `\log_{2}` has a base). The argument is parenthesised
//    (`\sin(2t)/5`) or, as sympy's grammar reads it, the products and quotients after the name up
//    to a `+`, a `-`, another function or a `\sqrt` (`\sin 2t`, `\sin x/2` = sin(x/2),
//    `\sin x\cos x` two factors); `\sin^2 x` is a power of the value. `e` is a variable, as sympy
//    reads it: `e^{t}` is not `\exp(t)`. Where a function flattens out (`\tanh 10`), the 1e-6
//    tolerance joins different values (Qwen2.5-Math's relative 1e-4 does too).
//  * Anything the parser cannot evaluate (matrices, unions, floors) falls back to equality of the
//    normalised strings.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace azr::eval {

// The final answer a response gives: the content of the LAST \boxed{...} (or \fbox{...}) with
// balanced braces; else the text inside the last <answer>...</answer> (and, inside it, a \boxed if
// present, else what follows the last "he answer is", as Qwen2.5-Math's extractor reads it); else
// the last number in the text. nullopt if none.
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
