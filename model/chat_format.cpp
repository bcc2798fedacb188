#include "model/chat_format.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace azr::model {

namespace {

void append_turn(std::string& out, std::string_view role, std::string_view content) {
  out += "<|im_start|>";
  out += role;
  out += '\n';
  out += content;
  out += "<|im_end|>\n";
}

}  // namespace

std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          std::string_view default_system) {
  if (messages.empty()) throw ChatFormatError("render_chatml: the conversation has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role == "system" || role == "user" || role == "assistant") continue;
    if (role == "tool")
      throw ChatFormatError("render_chatml: message " + std::to_string(i) +
                            " has role 'tool'; tool calling is not supported");
    throw ChatFormatError("render_chatml: message " + std::to_string(i) + " has unknown role '" +
                          role + "' (expected system, user or assistant)");
  }
  size_t size = 64 + default_system.size();
  for (const auto& m : messages) size += m.role.size() + m.content.size() + 24;
  std::string out;
  out.reserve(size);
  const bool leading_system = messages.front().role == "system";
  append_turn(out, "system", leading_system ? std::string_view(messages.front().content) : default_system);
  // The template renders user, assistant (no tool calls) and non-first system messages alike.
  for (size_t i = leading_system ? 1 : 0; i < messages.size(); ++i)
    append_turn(out, messages[i].role, messages[i].content);
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_r1(std::string_view prompt) {
  std::string out;
  out.reserve(kR1Prefix.size() + prompt.size() + kR1Suffix.size());
  out += kR1Prefix;
  out += prompt;
  out += kR1Suffix;
  return out;
}

PromptStyle parse_prompt_style(std::string_view name) {
  if (name == "paper") return PromptStyle::Paper;
  if (name == "compact") return PromptStyle::Compact;
  throw std::invalid_argument("unknown prompt style '" + std::string(name) + "' (expected paper or compact)");
}

std::optional<LearnedPromptStyle> learned_prompt_style(const std::filesystem::path& model_dir) {
  for (const char* name : {"bootstrap.json", "trainer_state.json"}) {
    const std::filesystem::path record = model_dir / name;
    std::ifstream in(record);
    if (!in) continue;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("prompt_style") || !j["prompt_style"].is_string()) continue;
    const std::string name_in_file = j["prompt_style"].get<std::string>();
    if (name_in_file == "paper") return LearnedPromptStyle{PromptStyle::Paper, record};
    if (name_in_file == "compact") return LearnedPromptStyle{PromptStyle::Compact, record};
  }
  return std::nullopt;
}

std::string_view prompt_style_name(PromptStyle style) { return style == PromptStyle::Paper ? "paper" : "compact"; }

std::string render_task_prompt(PromptStyle style, std::string_view body) {
  if (style == PromptStyle::Paper) return render_r1(body);
  std::string out = "User: ";
  out += body;
  out += kR1Suffix;
  return out;
}

}  // namespace azr::model
