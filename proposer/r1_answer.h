#pragma once
// The R1 response format shared by proposer and solver responses (azr-reference §3.4): a
// <think>…</think> block followed by an <answer>…</answer> block. The prompt ends with
// "Assistant: <think>", so a generation is judged as "<think>" + generation, up to an
// "Assistant:" the model writes itself (§3.4.1; judged_text).
#include <optional>
#include <string>
#include <string_view>

namespace azr::proposer {

// The text the reference's checks see (§3.4.1): "<think>" + the generation up to the first
// "Assistant:" in it. The reference splits prompt + response on "Assistant:" and keeps the piece
// after the prompt's own, so a next turn the model invents ("User: and for 6?\nAssistant: …")
// is cut off there, and its <answer> is not read as this turn's.
std::string judged_text(std::string_view generation);

// azr-reference §3.4.3: re.match(r"(?s)<think>.*?</think>\s*<answer>.*?</answer>") — anchored at
// the start, not at the end (trailing text after </answer> is allowed).
bool r1_format_ok(std::string_view text);

// azr-reference §3.4.2: the text between the LAST "<answer>" and the "</answer>" after it, or
// the end of the text when it is never closed (the reference's
// split("<answer>")[-1].split("</answer>")[0]); nullopt when there is no "<answer>".
std::optional<std::string> last_answer(std::string_view text);

// Python's str.strip() on ASCII whitespace.
std::string strip(std::string_view s);

}  // namespace azr::proposer
