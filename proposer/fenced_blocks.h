#pragma once
// Markdown fenced blocks in a response: ```python, ```input, ```output, ```message, ```input_3 …
// Blocks are scanned left to right as "```INFO\n CONTENT ```" pairs, so one block's closing fence
// is never read as the next block's opening one. A fence closed on its own line is a block too,
// "```output 5```" (info "output", content "5"), as the reference's ```output\s*\n?(.*?)``` reads
// it; so an inline span in prose (```f```) pairs its own fences and leaves the next block whole.
// A one-line span without both a word and content (```output```, ``` f(3) ```) is no block.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace azr::proposer {

struct FencedBlock {
  std::string info;     // the info string after the opening fence, trimmed, lower case ("python", "")
  std::string content;  // between the fences, one trailing newline removed
};

std::vector<FencedBlock> fenced_blocks(std::string_view text);

// The contents of every block whose info string is `tag` (lower case; the reference's tags are
// re.IGNORECASE, so ```Output is an output block), in order.
std::vector<std::string> blocks_tagged(std::string_view text, std::string_view tag);

// Whether `info` marks a code block: "python", "py", "python3" or nothing.
bool is_code_info(std::string_view info);

// A field written without its block, as the reference's fallbacks read it: the values of
// `# Field: value` lines (the value may start on the next line, where a marker starts a match of
// its own) and of <field>…</field> tags, case-insensitive, stripped, empty ones skipped, in
// order. `field` is "input", "output" or "message" (std::invalid_argument otherwise).
std::vector<std::string> comment_values(std::string_view text, std::string_view field);
std::vector<std::string> tag_values(std::string_view text, std::string_view field);

// A code block's program: leading blank lines and trailing whitespace go, and the indentation
// every line shares (textwrap.dedent), so a block indented under a list item runs; the reference
// strips the text, which dedents a one-function block the same way.
std::string program_text(std::string_view code);

// azr-reference §3.4.5: the reference's proposer code regex ```(?:python\s*)?\n?(.*?)\n?```,
// first match. It also matches an ```input block (capturing "input\n…"), the pitfall.
std::optional<std::string> reference_first_code_block(std::string_view text);

}  // namespace azr::proposer
