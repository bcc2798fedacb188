// `azr generate` and `azr logprobs` through the real binary, on a small random model written to a
// temporary directory, against the PyTorch reference (tests/model/torch_qwen2.py, float64).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/byte_tokenizer.h"
#include "model/presets.h"
#include "model/transformer.h"
#include "tests/test_support.h"

namespace {

namespace fs = std::filesystem;
using azr::testing::json_lines;
using azr::testing::ProcessResult;
using azr::testing::run_process;
using nlohmann::json;

std::string azr() { return azr::testing::env_or_fail("AZR_BIN"); }

// Loads the saved checkpoint with json + struct (independent of azr's reader) and runs the
// reference forward: logprobs of each sequence, and a greedy continuation recomputed with the
// full forward at every step.
const char* kReference = R"PY(
import json, struct, sys, torch
sys.path.insert(0, sys.argv[2])
from torch_qwen2 import Qwen2Ref
d = sys.argv[1]
cfg = json.load(open(d + "/config.json"))
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, base = json.loads(raw[8:8 + n]), 8 + n
params = {}
for name, h in header.items():
    if name == "__metadata__": continue
    assert h["dtype"] == "F32"
    a, b = h["data_offsets"]
    params[name] = torch.frombuffer(bytearray(raw[base + a:base + b]), dtype=torch.float32).reshape(h["shape"])
model = Qwen2Ref(cfg, params, torch.float64)
req = json.load(sys.stdin)
out = {"logprobs": [], "greedy": []}
with torch.no_grad():
    for ids in req["logprobs"]:
        lp = torch.log_softmax(model.forward(torch.tensor([ids]))[0], -1)
        out["logprobs"].append([None] + [lp[t - 1, ids[t]].item() for t in range(1, len(ids))])
    ids = list(req["greedy"]["prompt"])
    lps = []
    for _ in range(req["greedy"]["n"]):
        lp = torch.log_softmax(model.forward(torch.tensor([ids]))[0, -1], -1)
        nxt = int(lp.argmax())
        ids.append(nxt)
        lps.append(lp[nxt].item())
    out["greedy"] = {"ids": ids[len(req["greedy"]["prompt"]):], "logprobs": lps}
print(json.dumps(out))
)PY";

const std::vector<std::string> kTexts = {"Hello, world", "h\xc3\xa9llo \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac", "x",
                                         "The quick brown fox"};
const std::string kPrompt = "Once upon";

class GenerateCli : public ::testing::Test {
 protected:
  static inline std::string dir_, empty_dir_;
  static inline json ref_;

  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/azr_generate_cli_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = std::string(tmpl) + "/model";
    empty_dir_ = std::string(tmpl) + "/no_tokenizer";
    // init_std 0.2: logits spread over a few nats, so sampling is neither uniform nor greedy.
    auto m = azr::model::Transformer::random(azr::model::preset_config("azr-tiny"), 1234, 0.2f);
    m.save_pretrained(dir_);
    m.save_pretrained(empty_dir_);
    // use_regex = true: azr's BpeTokenizer needs a pre-tokenizer regex (same ids, no merges).
    azr::model::ByteTokenizer().save_tokenizer_json(dir_ + "/tokenizer.json", true);

    json req{{"logprobs", json::array()}, {"greedy", {{"prompt", encode(kPrompt)}, {"n", 12}}}};
    for (const auto& t : kTexts) req["logprobs"].push_back(encode(t));
    const std::string script = std::string(tmpl) + "/reference.py";
    std::ofstream(script) << kReference;
    ProcessResult r = run_process(
        {"/usr/bin/python3", script, dir_, azr::testing::env_or_fail("AZR_TESTS_DIR") + "/model"}, req.dump());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ref_ = json::parse(r.out);
  }
  static void TearDownTestSuite() { fs::remove_all(fs::path(dir_).parent_path()); }

  static std::vector<int32_t> encode(const std::string& s) { return azr::model::ByteTokenizer().encode(s); }
  static std::string bytes(const std::vector<int32_t>& ids) { return azr::model::ByteTokenizer().decode_bytes(ids); }

  ProcessResult generate(std::vector<std::string> extra) {
    std::vector<std::string> args{azr(), "generate", "--model", dir_, "--prompt", kPrompt, "--threads", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_process(args);
  }
  std::vector<int32_t> greedy_ids() { return ref_["greedy"]["ids"].get<std::vector<int32_t>>(); }
};

void expect_close(double got, double want, const std::string& what) {
  EXPECT_LE(std::abs(got - want), 1e-4 * std::max(1.0, std::abs(want))) << what << ": " << got << " vs " << want;
}

TEST_F(GenerateCli, LogprobsMatchTheReference) {
  std::string input;
  for (const auto& t : kTexts) input += json{{"text", t}}.dump() + "\n\n";  // blank lines are skipped
  input += json{{"ids", encode(kTexts[0])}}.dump() + "\n";                 // pre-tokenized input
  auto r = run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-", "--batch-size", "3"}, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), kTexts.size() + 1);
  for (size_t i = 0; i <= kTexts.size(); i++) {
    const size_t k = i < kTexts.size() ? i : 0;
    EXPECT_EQ(lines[i]["ids"], json(encode(kTexts[k]))) << i;
    const json& want = ref_["logprobs"][k];
    const json& got = lines[i]["logprobs"];
    ASSERT_EQ(got.size(), want.size()) << i;
    EXPECT_TRUE(got[0].is_null()) << i;
    for (size_t t = 1; t < got.size(); t++) expect_close(got[t].get<double>(), want[t].get<double>(), kTexts[k]);
  }
  EXPECT_EQ(lines[2]["logprobs"], json::array({nullptr}));  // "x": one token, nothing to predict it
}

TEST_F(GenerateCli, GreedyMatchesTheReference) {
  auto r = generate({"--temperature", "0", "--max-tokens", "12", "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  const json& g = lines[0];
  EXPECT_EQ(g["ids"], ref_["greedy"]["ids"]);
  ASSERT_EQ(g["logprobs"].size(), 12u);
  for (size_t i = 0; i < 12; i++)
    expect_close(g["logprobs"][i].get<double>(), ref_["greedy"]["logprobs"][i].get<double>(), "greedy");
  EXPECT_EQ(g["finish_reason"], "length");
  EXPECT_EQ(g["prompt_tokens"], kPrompt.size());
  EXPECT_EQ(g["new_tokens"], 12);
  EXPECT_EQ(g["text"], azr::model::utf8_lossy(bytes(greedy_ids())));
}

TEST_F(GenerateCli, SeedsAndSamples) {
  const std::vector<std::string> args{"--max-tokens", "32", "--ignore-eos", "--json", "--seed"};
  auto with_seed = [&](const std::string& s) {
    auto a = args;
    a.push_back(s);
    return generate(a);
  };
  auto a = with_seed("7"), b = with_seed("7"), c = with_seed("8");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(json::parse(a.out)["ids"], json::parse(c.out)["ids"]);
  auto three = generate({"--max-tokens", "8", "--ignore-eos", "--json", "--num-samples", "3"});
  ASSERT_EQ(three.exit_code, 0) << three.err;
  auto lines = json_lines(three.out);
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& l : lines) EXPECT_EQ(l["new_tokens"], 8);
  // Plain output: the samples' texts under headers, a summary on stderr.
  auto plain = generate({"--max-tokens", "4", "--num-samples", "2"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.rfind("--- sample 0 ---\n", 0), 0u) << plain.out;
  EXPECT_NE(plain.out.find("--- sample 1 ---\n"), std::string::npos) << plain.out;
  EXPECT_NE(plain.err.find("tokens/s"), std::string::npos) << plain.err;
  EXPECT_EQ(plain.err.find("greedily"), std::string::npos) << plain.err;  // sampled: no word of it
  // Greedy samples are one sample N times: said, and so they are.
  auto greedy = generate({"--max-tokens", "6", "--ignore-eos", "--json", "--num-samples", "2", "--temperature", "0"});
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  EXPECT_NE(greedy.err.find("--temperature 0 decodes greedily, so the 2 samples are the same"), std::string::npos)
      << greedy.err;
  const auto same = json_lines(greedy.out);
  ASSERT_EQ(same.size(), 2u);
  EXPECT_EQ(same[0]["ids"], same[1]["ids"]);
}

TEST_F(GenerateCli, StopIdAndStopString) {
  const auto g = greedy_ids();
  // The greedy continuation stops at the first occurrence of its 3rd token, which is kept.
  const size_t at = size_t(std::find(g.begin(), g.end(), g[2]) - g.begin());
  auto r = generate({"--temperature", "0", "--max-tokens", "12", "--ignore-eos", "--json", "--stop-id",
                     std::to_string(g[2])});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["finish_reason"], "stop_token");
  EXPECT_EQ(j["ids"], json(std::vector<int32_t>(g.begin(), g.begin() + long(at) + 1)));

  const std::string all = bytes(g), stop = bytes({g[3], g[4]});
  auto s = generate({"--temperature", "0", "--max-tokens", "12", "--ignore-eos", "--json", "--stop", stop});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  j = json::parse(s.out);
  EXPECT_EQ(j["finish_reason"], "stop_string");
  EXPECT_EQ(j["text"], azr::model::utf8_lossy(all.substr(0, all.find(stop))));
}

// The device option: cpu-guarded runs the CPU kernels behind memory the host cannot touch, so
// the same output proves generate and logprobs reach the model only through the op table.
// "cuda" works only where the build has CUDA and a GPU is usable; elsewhere it is a usage error
// that says which of the two is missing.
TEST_F(GenerateCli, DeviceOptionGuardedMatchesCpuAndUnusableDevicesAreUsageErrors) {
  const std::vector<std::string> sample{"--max-tokens", "16", "--ignore-eos", "--json", "--seed", "3", "--top-p", "0.9"};
  auto on = [&](const std::string& device) {
    auto args = sample;
    args.insert(args.end(), {"--device", device});
    return generate(args);
  };
  const ProcessResult cpu = on("cpu"), guarded = on("cpu-guarded");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(guarded.exit_code, 0) << guarded.err;
  EXPECT_EQ(guarded.out, cpu.out);
  const std::string lines = "{\"text\": \"def f(x):\"}\n{\"ids\": [3, 1, 4, 1, 5]}\n";
  const ProcessResult lp_cpu = run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-"}, lines);
  const ProcessResult lp_guarded =
      run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-", "--device", "cpu-guarded"}, lines);
  ASSERT_EQ(lp_guarded.exit_code, 0) << lp_guarded.err;
  EXPECT_EQ(lp_guarded.out, lp_cpu.out);

  const ProcessResult bogus = on("tpu");
  EXPECT_EQ(bogus.exit_code, 2);
  EXPECT_NE(bogus.err.find("--device: unknown device 'tpu' (known: cpu"), std::string::npos) << bogus.err;
  // Decode graphs (on by default; --no-decode-graphs turns them off, --decode-graphs says the
  // default): no effect where the table cannot record (the CPU), and on a GPU the same output (a
  // replay runs the eager step's kernels); logprobs generates nothing and has no such flags.
  auto with_graphs_flag = [&](const std::string& device, const std::string& flag) {
    auto args = sample;
    args.insert(args.end(), {"--device", device, flag});
    return generate(args);
  };
  for (const std::string flag : {"--decode-graphs", "--no-decode-graphs"}) {
    const ProcessResult cpu_flag = with_graphs_flag("cpu", flag);
    ASSERT_EQ(cpu_flag.exit_code, 0) << flag << ": " << cpu_flag.err;
    EXPECT_EQ(cpu_flag.out, cpu.out) << flag;
    EXPECT_EQ(run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-", flag}, lines).exit_code, 2) << flag;
  }

  const ProcessResult cuda = on("cuda");
  if (cuda.exit_code == 0) {
    EXPECT_EQ(with_graphs_flag("cuda", "--no-decode-graphs").out, cuda.out);
  } else {  // a machine without a usable GPU, or a build without CUDA
    EXPECT_EQ(cuda.exit_code, 2);
    EXPECT_TRUE(cuda.err.find("no usable GPU") != std::string::npos ||
                cuda.err.find("built without the CUDA backend") != std::string::npos)
        << cuda.err;
    EXPECT_EQ(cuda.out, "");
  }
}

// --matmul-precision bf16: the log-probs of `azr logprobs` move by bf16 rounding, not more; the
// guarded device gives the CPU's bf16 output exactly; an unknown precision is a usage error. This
// fixture's init_std 0.2 makes logits of tens of nats, where bf16's 2^-9 relative rounding of
// each operand moves a log-prob by up to ~0.1 (0.09 seen); a wrong product moves it by nats.
TEST_F(GenerateCli, MatmulPrecisionBf16StaysNearFp32AndUnknownPrecisionsAreUsageErrors) {
  const std::string lines = "{\"ids\": [3, 1, 4, 1, 5, 9, 2, 6]}\n";
  auto logprobs = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{azr(), "logprobs", "--model", dir_, "--jsonl", "-"};
    args.insert(args.end(), extra.begin(), extra.end());
    const ProcessResult r = run_process(args, lines);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const std::string fp32 = logprobs({"--matmul-precision", "fp32"}), bf16 = logprobs({"--matmul-precision", "bf16"});
  EXPECT_EQ(logprobs({"--matmul-precision", "bf16", "--device", "cpu-guarded"}), bf16);
  // The default, auto, is fp32 off a GPU (bf16 on one: the GPU tests run the bf16 table).
  EXPECT_EQ(logprobs({}), fp32);
  EXPECT_EQ(logprobs({"--matmul-precision", "auto", "--device", "cpu-guarded"}), fp32);
  const auto lp32 = nlohmann::json::parse(fp32)["logprobs"], lp16 = nlohmann::json::parse(bf16)["logprobs"];
  ASSERT_EQ(lp32.size(), lp16.size());
  double worst = 0;
  for (size_t i = 0; i < lp32.size(); i++)
    if (lp32[i].is_number()) worst = std::max(worst, std::fabs(lp32[i].get<double>() - lp16[i].get<double>()));
  EXPECT_GT(worst, 0.0) << "bf16 GEMMs gave the fp32 log-probs exactly";
  EXPECT_LT(worst, 0.25);

  auto args = std::vector<std::string>{"--max-tokens", "4", "--matmul-precision", "fp16"};
  const ProcessResult bad = generate(args);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--matmul-precision: unknown matmul precision 'fp16' (known: auto, fp32, bf16)"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(bad.out, "");
}

// Past the config's max_position_embeddings the model runs on untrained positions: said on stderr,
// as HF's generate says it, and the run goes on.
TEST_F(GenerateCli, PastTheTrainedContextWarns) {
  std::ifstream config(dir_ + "/config.json");
  const int64_t context = json::parse(config)["max_position_embeddings"].get<int64_t>();
  const auto within = generate({"--max-tokens", "1", "--json"});
  ASSERT_EQ(within.exit_code, 0) << within.err;
  EXPECT_EQ(within.err.find("max_position_embeddings"), std::string::npos) << within.err;
  const auto past = generate({"--max-tokens", std::to_string(context), "--stop-id", "32", "--json"});
  ASSERT_EQ(past.exit_code, 0) << past.err;
  EXPECT_NE(past.err.find("+ --max-tokens " + std::to_string(context) + " pass the model's max_position_embeddings (" +
                          std::to_string(context) + ")"),
            std::string::npos)
      << past.err;
  // logprobs says the same of a sequence longer than the context (it said nothing).
  const std::string ids = json{{"ids", std::vector<int>(size_t(context) + 1, 65)}}.dump() + "\n";
  const auto scored = run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-"}, ids);
  ASSERT_EQ(scored.exit_code, 0) << scored.err;
  EXPECT_NE(scored.err.find("a sequence of " + std::to_string(context + 1) +
                            " tokens passes the model's max_position_embeddings (" + std::to_string(context) + ")"),
            std::string::npos)
      << scored.err;
}

TEST_F(GenerateCli, BadInputsExitTwoWithOneMessage) {
  auto expect_usage = [](const ProcessResult& r, const std::string& needle) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("azr: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  };
  expect_usage(run_process({azr(), "generate", "--model", "/nonexistent/model", "--prompt", "x"}), "/nonexistent/model");
  expect_usage(run_process({azr(), "generate", "--model", empty_dir_, "--prompt", "x"}), empty_dir_ + "/tokenizer.json");
  expect_usage(generate({"--top-p", "0"}), "--top-p: 0 is too small: it must be in (0, 1]");
  expect_usage(generate({"--top-p", "nan"}), "--top-p: expected a finite number, got 'nan'");
  expect_usage(generate({"--temperature", "-1"}), "--temperature: -1 is too small: it must be 0 or more");
  expect_usage(generate({"--temperature", "inf"}), "--temperature: expected a finite number, got 'inf'");
  // CLI11 read -1 for an unsigned flag as 2**64 - 1 (a fixed seed where -1 often means "random").
  expect_usage(generate({"--seed", "-1"}), "--seed: expected a whole number from 0 to 18446744073709551615, got '-1'");
  // Past 64 bits, CLI11 held the seed at 2^64 - 1, silently; a float flag past a float's range
  // became inf ("must be 0 or more") or 0 (greedy).
  expect_usage(generate({"--seed", "99999999999999999999999"}), "--seed: expected a whole number from 0 to");
  expect_usage(generate({"--temperature", "1e39"}), "--temperature: 1e39 is too large for a float");
  expect_usage(generate({"--temperature", "1e-50"}), "--temperature: 1e-50 is too small for a float: it would be 0");
  // 2^31 - 1 samples ended in a bare std::bad_alloc, exit 1.
  expect_usage(generate({"--num-samples", "2147483647"}),
               "--num-samples: 2147483647 is too large: it must be between 1");
  expect_usage(generate({"--top-k", "99999999999999999999"}),
               "--top-k: 99999999999999999999 is too large: it must be between 0 and 2147483647");
  // Within 64 bits but past an int: CLI11's bare "Could not convert: --top-k = 99999999999".
  expect_usage(generate({"--top-k", "99999999999"}), "--top-k: 99999999999 is too large: it must be between 0 and");
  expect_usage(generate({"--stop-id", "99999999999"}), "--stop-id: 99999999999 is too large: it must be between 0");
  expect_usage(generate({"--threads", "99999999999"}), "--threads: 99999999999 is too large: it must be between 0");
  // 100,000,000 reached the KV cache's allocation: std::bad_alloc, exit 1.
  expect_usage(generate({"--max-tokens", "100000000"}), "--max-tokens: 100000000 is too large: it must be between 0");
  expect_usage(run_process({azr(), "generate", "--model", dir_ + "/config.json", "--prompt", "x"}),
               "--model " + dir_ + "/config.json: is a file; give the model directory");
  expect_usage(run_process({azr(), "generate", "--model", dir_, "--prompt", ""}), "at least one token");
  // Qwen's tokenizer on azr-tiny (263 rows): "Hello world" is ids 9707 and 1879.
  const std::string qwen = azr::testing::env_or_fail("AZR_SHARED_DIR") + "/models/qwen-tokenizer";
  expect_usage(run_process({azr(), "generate", "--model", dir_, "--tokenizer", qwen, "--prompt", "Hello world"}),
               "--prompt: the tokenizer gives token id 9707, past the model's 263 embedding rows");
  expect_usage(run_process({azr(), "logprobs", "--model", dir_, "--tokenizer", qwen, "--jsonl", "-"},
                           "{\"text\": \"Hello world\"}\n"),
               "<stdin>:1: the tokenizer gives token id 9707");

  // One forward's sequences are one GPU attention grid's z (65,535): 70,000 used to reach the
  // launch and fail there with CUDA's "invalid configuration argument".
  expect_usage(run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-", "--batch-size", "70000"},
                           "{\"ids\": [1, 2]}\n"),
               "--batch-size: Value 70000 not in range 1 to 65535");
  EXPECT_EQ(run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-", "--batch-size", "65535"},
                        "{\"ids\": [1, 2]}\n")
                .exit_code,
            0);
  // logprobs: every line is checked first, so a bad line leaves nothing on stdout.
  const std::string bad = fs::path(dir_).parent_path() / "bad.jsonl";
  std::ofstream(bad) << "{\"text\": \"fine\"}\n{\"text\": \"broken\"\n";
  expect_usage(run_process({azr(), "logprobs", "--model", dir_, "--jsonl", bad}), bad + ":2: not valid JSON");
  expect_usage(run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-"}, "{\"ids\": [1, 2]}\n{\"ids\": [1, 99999]}\n"),
               "<stdin>:2: token id 99999 is outside");
  expect_usage(run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-"}, "[1, 2]\n"), "<stdin>:1: expected an object");
  expect_usage(run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-"}, "{\"text\": \"\"}\n"), "<stdin>:1: field 'text' is empty");
  expect_usage(run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-"}, "{\"ids\": [1, \"a\"]}\n"), "<stdin>:1: field 'ids'");
  // Past INT64_MAX nlohmann holds the number unsigned; it was reported as token id -1.
  expect_usage(run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-"}, "{\"ids\": [18446744073709551615]}\n"),
               "<stdin>:1: token id 18446744073709551615 is outside");
  const std::pair<const char*, const char*> lines[] = {
      {"{\"text\": \"a\", \"ids\": [1]}\n", "<stdin>:1: give exactly one of the fields 'text' and 'ids'"},
      {"{\"id\": 3}\n", "<stdin>:1: give exactly one of the fields 'text' and 'ids'"},
      {"{\"ids\": 5}\n", "<stdin>:1: field 'ids' must be an array of token ids"},
      {"{\"ids\": []}\n", "<stdin>:1: field 'ids' is empty"},
      {"{\"text\": 5}\n", "<stdin>:1: field 'text' must be a string"},
  };
  for (const auto& [line, message] : lines)
    expect_usage(run_process({azr(), "logprobs", "--model", dir_, "--jsonl", "-"}, line), message);
}

}  // namespace
