// azr tokenize: encode and decode exactly as training does.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/input.h"
#include "model/json_text.h"
#include "model/tokenizer.h"

namespace azr::cli {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::strict); }

}  // namespace

CLI::App* add_tokenize_command(CLI::App& app, TokenizeOptions& o) {
  CLI::App* c = app.add_subcommand("tokenize", "Encode text to token ids (or --decode ids to text) exactly as training does");
  c->footer(
      "Encoding prints one line {\"ids\": [...]} per input: --text S, or --jsonl FILE (- = stdin) of {\"text\": ...} "
      "lines. With --decode, --jsonl lines are {\"ids\": [...]} and each prints {\"text\": ...}. No BOS/EOS is added.");
  c->add_option("--tokenizer", o.tokenizer, "directory holding tokenizer.json, or the file")
      ->check(non_empty_path())->required();
  c->add_option("--text", o.text, "one string to encode");
  c->add_option("--jsonl", o.jsonl, "JSONL input, - for stdin")->check(non_empty_path());
  c->add_flag("--decode", o.decode, "decode {\"ids\": [...]} lines instead");
  return c;
}

int run_tokenize(const TokenizeOptions& o) {
  if (o.text.has_value() == !o.jsonl.empty()) throw UsageError("tokenize: give either --text S or --jsonl FILE");
  if (o.decode && o.jsonl.empty()) throw UsageError("tokenize: --decode reads --jsonl lines of {\"ids\": [...]}");
  // A directory (tokenizer.json inside) or the file, as generate's --tokenizer: a directory without
  // one is named as such (it was read as the file: "not valid JSON").
  const std::unique_ptr<model::BpeTokenizer> tok = load_model_tokenizer("", o.tokenizer);
  if (o.text) {
    try {
      std::cout << dump(json{{"ids", tok->encode(*o.text)}}) << '\n';
    } catch (const model::TokenizerError& e) {
      throw UsageError(std::string("--text: ") + e.what());
    }
    return 0;
  }
  InputFile input(o.jsonl);
  // Every line is checked before anything is printed, so a bad line never leaves half an output.
  std::vector<std::string> out;
  JsonLines lines(input.stream(), input.name());
  for (json j; lines.next(j);) {
    const std::string where = lines.where();
    try {
      if (o.decode) {
        if (!j.is_object()) throw UsageError(where + "expected a JSON object {\"ids\": [...]}");
        if (!j.contains("ids")) throw UsageError(where + "field 'ids' is missing");
        if (!j["ids"].is_array()) throw UsageError(where + "field 'ids' must be an array of token ids");
        std::vector<int32_t> ids;
        for (const auto& v : j["ids"]) ids.push_back(token_id_in_line(v, int64_t(tok->vocab_size()), where));
        // Decoded bytes may not be valid UTF-8 (ids can split a character): JSON shows them lossily.
        out.push_back(json{{"text", model::utf8_lossy(tok->decode(ids))}}.dump());
      } else {
        if (!j.is_object()) throw UsageError(where + "expected a JSON object {\"text\": ...}");
        if (!j.contains("text")) throw UsageError(where + "field 'text' is missing");
        if (!j["text"].is_string()) throw UsageError(where + "field 'text' must be a string");
        out.push_back(dump(json{{"ids", tok->encode(j["text"].get<std::string>())}}));
      }
    } catch (const model::TokenizerError& e) {
      throw UsageError(where + e.what());
    }
  }
  for (const auto& l : out) std::cout << l << '\n';
  return 0;
}

}  // namespace azr::cli
