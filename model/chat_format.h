#pragma once
// Chat formatting: Qwen2.5's ChatML template (instruct models) and the plain R1-style wrapper
// the Absolute Zero reference uses for base models (../shared/METHOD.md, research/azr-reference.md
// §3.1). Both return text; encode it with a Tokenizer (special tokens are matched in the text).
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace azr::model {

// A bad conversation (unknown role, no messages).
class ChatFormatError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// The system prompt Qwen2.5's chat template inserts when the first message is not a system one.
inline constexpr std::string_view kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// Qwen2.5-Instruct's chat_template (tokenizer_config.json; the same as llama.cpp's
// Qwen-Qwen2.5-7B-Instruct.jinja) rendered with tools = null, byte for byte:
//   <|im_start|>system\n{first system content, or default_system}<|im_end|>\n
//   then per message (a leading system message is not repeated):
//   <|im_start|>{role}\n{content}<|im_end|>\n
//   and, if add_generation_prompt, <|im_start|>assistant\n
// Tools, tool calls and the "tool" role are not supported (ChatFormatError). Unknown roles, which
// the Jinja template would silently drop, are a ChatFormatError; so is an empty conversation
// (the template fails on messages[0] there). Contents are inserted verbatim.
std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          std::string_view default_system = kQwenDefaultSystem);

// The DeepSeek-R1 style prompt of the Absolute Zero reference (`instruction_following` in
// absolute_zero_reasoner/data_construction/process_data.py, L51 per research/azr-reference.md
// §3.1), i.e. kR1Prefix + prompt + kR1Suffix. The generation starts inside <think>.
inline constexpr std::string_view kR1Prefix =
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. The reasoning process and answer are enclosed within "
    "<think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning process "
    "here </think> <answer> answer here </answer>. User: ";
inline constexpr std::string_view kR1Suffix = "\nAssistant: <think>";
std::string render_r1(std::string_view prompt);

// How the task engine words its prompts (config key algorithm.prompt_style).
//   Paper:   the reference's instructions inside render_r1 (§3.1-3.2), for pretrained models.
//   Compact: a one-line instruction and the same code/input/output blocks, wrapped as
//            "User: " + body + kR1Suffix. For tiny byte-level models that learn the formats from
//            nothing (azr bootstrap): a paper proposer prompt is ~2.4k byte tokens of which the
//            task's type is a few words deep inside; the compact one is ~4x shorter, so the warm
//            start trains ~4x more transcripts per second and the type sits in the first line.
// The response format, and so every parser and reward, is the same in both.
enum class PromptStyle { Paper, Compact };
// "paper" | "compact"; anything else is std::invalid_argument.
PromptStyle parse_prompt_style(std::string_view name);
std::string_view prompt_style_name(PromptStyle style);
// The prompt wording a model directory records it learned, and the file that says so: a model
// `azr bootstrap` made (bootstrap.json) or a checkpoint `azr train` wrote (trainer_state.json,
// the run's algorithm.prompt_style). nullopt when neither file holds a known "prompt_style"
// (a Hugging Face model; a checkpoint written before the key).
struct LearnedPromptStyle {
  PromptStyle style;
  std::filesystem::path record;
};
std::optional<LearnedPromptStyle> learned_prompt_style(const std::filesystem::path& model_dir);
// The body wrapped for `style`: render_r1(body) or "User: " + body + kR1Suffix.
std::string render_task_prompt(PromptStyle style, std::string_view body);

}  // namespace azr::model
