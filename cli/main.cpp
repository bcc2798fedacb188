// azr: the single command. Git-style subcommands; exit codes 0 ok, 1 failed, 2 bad usage/input.
#include <CLI/CLI.hpp>
#include <seccomp.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <new>
#include <string>

#include "azr/build_info.h"
#include "cli/commands.h"
#include "cli/number_checks.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_core.h"
#include "trainer/dist.h"
#if AZR_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace {

std::string version_text() {
  const scmp_version* sv = seccomp_version();
  // The CUDA line names the architectures compiled in, not the device: --version never touches a GPU.
  const std::string cpu = "cpu (OpenBLAS " + azr::kernels::blas_core_description() + ", OpenMP)";
#if AZR_HAVE_CUDA
  const std::string backends = cpu + ", cuda (" + azr::kernels::cuda_compiled_architectures() + "; cuBLASLt)";
#else
  const std::string backends = cpu;
#endif
  std::string precisions;
  for (const std::string& p : azr::kernels::matmul_precision_names()) precisions += (precisions.empty() ? "" : ", ") + p;
  return std::string("azr ") + AZR_VERSION + " (" + AZR_GIT_DESCRIBE + ")\n" + "backends: " + backends +
         "; matmul precisions: " + precisions + "\n" + "gradient all-reduce: host (" +
         (azr::trainer::dist::mpi_compiled() ? "mpi, " : "") + "tcp)" +
         (azr::trainer::dist::nccl_compiled() ? ", nccl" : "") + "\n" +
         "sandbox: embedded CPython " + AZR_PYTHON_VERSION + ", libseccomp " + std::to_string(sv->major) + "." +
         std::to_string(sv->minor) + "." + std::to_string(sv->micro);
}

}  // namespace

namespace {

// CLI11 answers `azr frobnicate` and `azr buffer bogus` with "A subcommand is required", naming
// neither the word nor the commands. Follows the leading words of argv down the command tree;
// the first that names no command where one is expected gets a message of its own ("" if none).
// `missing_command`: the parse failed for want of a subcommand, which CLI11 said as "A subcommand
// is required" without naming any.
std::string unknown_command(CLI::App& app, int argc, char** argv, bool missing_command) {
  CLI::App* at = &app;
  std::string path = "azr";
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') {
      // `azr --bogus` failed as "a subcommand is required" too, and was answered as a missing
      // command. Only where a command is expected: a leaf's RequiredError is a missing argument.
      // "--name=value" is --name, "-ovalue" is -o.
      const std::string arg = argv[i];
      const std::string word = arg.starts_with("--") ? arg.substr(0, arg.find('=')) : arg.substr(0, 2);
      if (missing_command && word != "-" && word != "--" && !at->get_option_no_throw(word) &&
          !at->get_subcommands([](CLI::App*) { return true; }).empty())
        return "unknown option '" + word + "' for " + path + " (" + path + " --help lists its options)";
      break;
    }
    const auto commands = at->get_subcommands([](CLI::App*) { return true; });
    if (commands.empty()) return "";
    CLI::App* next = nullptr;
    std::string names;
    for (CLI::App* c : commands) {
      if (c->check_name(argv[i])) next = c;
      names += (names.empty() ? "" : ", ") + c->get_name();
    }
    if (!next) return "unknown command '" + std::string(argv[i]) + "' for " + path + "; the commands: " + names;
    at = next;
    path += " " + next->get_name();
  }
  const auto commands = at->get_subcommands([](CLI::App*) { return true; });
  if (!missing_command || commands.empty()) return "";
  std::string names;
  for (CLI::App* c : commands) names += (names.empty() ? "" : ", ") + c->get_name();
  return "a command is missing after '" + path + "': " + names + " (" + path + " --help says what each does)";
}

// CLI11's conversion errors, said as the checked flags' are: "Could not convert: --limit = 1e3"
// (a number an integer flag cannot take) and "--limit: 1 required INT:0 or more missing" (no
// value). "" for any other error.
std::string conversion_message(const CLI::ParseError& e) {
  const std::string m = e.what();
  if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    const std::string prefix = "Could not convert: ";
    const size_t eq = m.find(" = ");
    if (!m.starts_with(prefix) || eq == std::string::npos) return "";
    const std::string name = m.substr(prefix.size(), eq - prefix.size());
    const std::string value = m.substr(eq + 3);
    double number = 0;
    // A float flag's check refused what is no number before conversion: this one takes integers.
    if (azr::cli::number_checks_detail::finite_number(value, number))
      return name + ": expected a whole number, got '" + value + "'";
    return name + ": cannot read '" + value + "'";
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && m.ends_with(" missing") && m.find(": ") != std::string::npos)
    return m.substr(0, m.find(": ")) + ": its value is missing";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  auto logger = spdlog::stderr_color_mt("azr");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");

  CLI::App app{"azr: teaches a language model to reason through self-play (Absolute Zero), in C++/CUDA"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  app.fallthrough(false);
  // Every usage error starts "azr: ", CLI11's parse errors too, as the command's own ones do. A
  // value's own check names the option and what it takes, in one line, as the conversion errors
  // below are said: CLI11's "Run with --help for more information." is kept for the others.
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    if (dynamic_cast<const CLI::ValidationError*>(&e)) return "azr: " + std::string(e.what()) + "\n";
    return "azr: " + CLI::FailureMessage::simple(a, e);
  });

  azr::cli::ExecOptions exec_opts;
  CLI::App* exec = azr::cli::add_exec_command(app, exec_opts);
  azr::cli::BufferOptions buffer_opts;
  CLI::App* buffer = azr::cli::add_buffer_command(app, buffer_opts);
  azr::cli::TokenizeOptions tokenize_opts;
  CLI::App* tokenize = azr::cli::add_tokenize_command(app, tokenize_opts);
  azr::cli::GenerateOptions generate_opts;
  CLI::App* generate = azr::cli::add_generate_command(app, generate_opts);
  azr::cli::LogprobsOptions logprobs_opts;
  CLI::App* logprobs = azr::cli::add_logprobs_command(app, logprobs_opts);
  azr::cli::TaskOptions task_opts;
  CLI::App* task = azr::cli::add_task_command(app, task_opts);
  azr::cli::EvalOptions eval_opts;
  CLI::App* eval = azr::cli::add_eval_command(app, eval_opts);
  azr::cli::TrainCommandOptions train_opts;
  CLI::App* train = azr::cli::add_train_command(app, train_opts);
  azr::cli::BootstrapCommandOptions bootstrap_opts;
  CLI::App* bootstrap = azr::cli::add_bootstrap_command(app, bootstrap_opts);
  azr::cli::MemoryOptions memory_opts;
  CLI::App* memory = azr::cli::add_memory_command(app, memory_opts);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const std::string word = unknown_command(app, argc, argv, dynamic_cast<const CLI::RequiredError*>(&e));
        !word.empty()) {
      std::cerr << "azr: " << word << '\n';
      return 2;
    }
    if (const std::string said = conversion_message(e); !said.empty()) {
      std::cerr << "azr: " << said << '\n';
      return 2;
    }
    int code = app.exit(e);  // prints help/version (code 0) or the usage error
    return code == 0 ? 0 : 2;
  }
  // What a command printed reaches stdout only when it is flushed, and a write that failed (a
  // full disk under `azr buffer export db > tasks.jsonl`) only shows in the stream's state:
  // checked once, here, so no command exits 0 with its output lost.
  const auto with_output_checked = [](int rc) {
    std::cout.flush();
    if (std::cout) return rc;
    // No errno: the stream's failure may lie several system calls back (closing the database).
    std::cerr << "azr: error: cannot write to standard output (a full disk, a closed pipe or file?): the output "
                 "is incomplete\n";
    return rc != 0 ? rc : 1;
  };
  try {
    if (exec->parsed()) return with_output_checked(azr::cli::run_exec(exec_opts));
    if (buffer->parsed()) return with_output_checked(azr::cli::run_buffer(buffer_opts));
    if (tokenize->parsed()) return with_output_checked(azr::cli::run_tokenize(tokenize_opts));
    if (generate->parsed()) return with_output_checked(azr::cli::run_generate(generate_opts));
    if (logprobs->parsed()) return with_output_checked(azr::cli::run_logprobs(logprobs_opts));
    if (task->parsed()) return with_output_checked(azr::cli::run_task(task_opts));
    if (eval->parsed()) return with_output_checked(azr::cli::run_eval(eval_opts));
    if (train->parsed()) return with_output_checked(azr::cli::run_train(train_opts));
    if (bootstrap->parsed()) return with_output_checked(azr::cli::run_bootstrap(bootstrap_opts));
    if (memory->parsed()) return with_output_checked(azr::cli::run_memory(memory_opts));
  } catch (const azr::cli::UsageError& e) {  // the user's input: one plain message, exit 2
    std::cerr << "azr: " << e.what() << '\n';
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // "filesystem error: status: Permission denied [locked/qs]": said as the other messages are.
    std::cerr << "azr: error: " << e.path1().string() << (e.path2().empty() ? "" : " -> " + e.path2().string()) << ": "
              << e.code().message() << '\n';
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "azr: error: out of memory: the command asked for more memory than this machine gave it (sizes "
                 "such as --batch-size, --max-tokens or --num-samples multiply)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "azr: error: " << e.what() << '\n';
    return 1;
  }
  return 2;
}
