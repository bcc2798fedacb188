#pragma once
// EvalPlus's test inputs as Python argument lists. The files store each problem's base_input and
// plus_input as JSON arrays of argument arrays. JSON has no tuples or complex numbers, so EvalPlus
// turns some MBPP+ arguments back into what the task's function takes when it loads them
// (evalplus/data/mbpp.py, `mbpp_deserialize_inputs`): 52 of MbppPlus v0.2.0's 378 tasks, such as
// Mbpp/2's two tuples. A function run on a list where its task gives a tuple can answer
// differently (`a + (x,)` raises, `t[::-1]` is a list), so a correct solution failed here.
#include <string>
#include <string_view>
#include <vector>

namespace azr::eval {

// raw: the JSON text of a base_input or plus_input field: an array of argument arrays, or `{}`
// for none (MbppPlus stores Mbpp/793's plus_input so). task_id: "Mbpp/2", "HumanEval/0", ...
// Returns one argument list per input ("(3, 4), (5, 7)"), after EvalPlus's conversion for the
// task if it has one. Throws std::runtime_error on malformed JSON, a NaN argument, or an
// argument list the task's conversion does not fit (EvalPlus would raise as it loaded it).
std::vector<std::string> evalplus_argument_lists(std::string_view raw, std::string_view task_id);

// A finite or infinite float as Python source that reads back as the same value (`2.0`,
// `1e-07`, `1e999`); NaN has no literal.
std::string python_float(double v);

}  // namespace azr::eval
