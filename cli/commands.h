#pragma once
// One function pair per subcommand: add_X_command declares its flags, run_X_command runs it
// and returns the exit code. Errors the user caused throw UsageError (exit 2).
#include <CLI/CLI.hpp>

#include <optional>
#include <stdexcept>
#include <string>

namespace azr::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ExecOptions {
  std::string file;       // a program file (FILE.py)
  std::string input;      // its argument list
  std::string jsonl;      // or: a JSONL file of {program, input}, "-" for stdin
  std::string entry = "f";
  double timeout = 2.0;   // CPU seconds per job
  double wall_timeout = 0;
  double memory_mib = 512;
  uint64_t output_limit = 64 << 10;
  int workers = 0;
  bool determinism = false;
  std::string input_mode = "literal";
};

CLI::App* add_exec_command(CLI::App& app, ExecOptions& o);
int run_exec(const ExecOptions& o);

struct BufferOptions {
  std::string action;  // set by the chosen subcommand
  std::string db;
  bool json = false;
  // list
  std::string type, origin, steps, sort = "id";
  bool descending = false;
  int64_t limit = 50;
  // show
  int64_t id = 0;
  // export
  std::string format = "jsonl", output;
  bool core = false;
  // import
  std::string file;
  bool skip_invalid = false;
  int64_t capacity = 16384;
  std::string policy = "evict-oldest";
  double wait_seconds = 5;  // for another writer's lock
};

CLI::App* add_buffer_command(CLI::App& app, BufferOptions& o);
int run_buffer(const BufferOptions& o);

struct TokenizeOptions {
  std::string tokenizer, jsonl;
  std::optional<std::string> text;  // set even when empty: "" is a string to encode
  bool decode = false;
};

CLI::App* add_tokenize_command(CLI::App& app, TokenizeOptions& o);
int run_tokenize(const TokenizeOptions& o);

}  // namespace azr::cli
