// End-to-end tests of the `pagoda` binary: exit codes, one-line errors, and the
// golden stories260K continuation.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

const std::string kShared = PAGODA_SHARED_DIR;
const std::string kStories = kShared + "/models/stories260K/stories260K.gguf";

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunResult run(const std::string& args) {
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    std::string cmd = std::string(PAGODA_BINARY) + " " + args + " >" + out.string() + " 2>" + err.string() +
                      " </dev/null";
    int status = std::system(cmd.c_str());
    RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }
  fs::path dir_;
};

bool has_stories() { return fs::exists(kStories); }

TEST_F(Cli, NoCommandPrintsUsageAndExitsTwo) {
  RunResult r = run("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("generate"), std::string::npos) << r.err;
}

TEST_F(Cli, UnknownOptionExitsTwo) {
  RunResult r = run("generate -m x.gguf -p hi --no-such-flag");
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(Cli, MissingRequiredOptionExitsTwo) {
  RunResult r = run("generate -p hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model"), std::string::npos) << r.err;
}

TEST_F(Cli, BadOptionValueExitsTwo) {
  RunResult r = run("generate -m x.gguf -p hi -n minus-one");
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(Cli, GenerateContinuesStoriesWithTheGreedyStory) {
  if (!has_stories()) GTEST_SKIP();
  // "Once upon a time" is BOS + the first 4 greedy tokens after BOS (403 407 261 378), so
  // 28 more greedy tokens are tokens 5..32 of ../shared/models/stories260K/README.md's
  // list (an independent numpy forward pass; the same text as llama2.c run.c -t 0),
  // decoded with the vocabulary. Exactly that text, then the newline generate ends with.
  RunResult r = run("generate -m " + kStories + " -p \"Once upon a time\" -n 28 --temp 0 -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string story =
      ", there was a little girl named Lily. She loved to play outside in the park. One";
  EXPECT_EQ(r.out, story + "\n");
  EXPECT_NE(r.err.find("generation: 28 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("load time"), std::string::npos) << r.err;
}

TEST_F(Cli, SameSeedSameSample) {
  if (!has_stories()) GTEST_SKIP();
  std::string args = "generate -m " + kStories + " -p \"Once upon a time\" -n 30 --temp 1 --seed 42";
  RunResult a = run(args), b = run(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST_F(Cli, MissingModelFileIsOneLineErrorExitOne) {
  RunResult r = run("generate -m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(Cli, TruncatedModelIsOneLineErrorExitOne) {
  if (!has_stories()) GTEST_SKIP();
  std::string data = slurp(kStories);
  fs::path cut = dir_ / "cut.gguf";
  std::ofstream(cut, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size() / 2));
  RunResult r = run("generate -m " + cut.string() + " -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(cut.string()), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(Cli, InspectListsMetadataAndTensors) {
  if (!has_stories()) GTEST_SKIP();
  RunResult r = run("inspect " + kStories);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("general.architecture"), std::string::npos);
  EXPECT_NE(r.out.find("token_embd.weight"), std::string::npos);
  EXPECT_NE(r.out.find("[64, 512]"), std::string::npos) << r.out;
}

TEST_F(Cli, TokenizeIdsOnlyOnVocabOnlyGguf) {
  RunResult r = run("tokenize -m " + kShared + "/models/ggml-vocab/ggml-vocab-llama-spm.gguf --ids-only \"Hello world\"");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1 15043 3186\n");
  RunResult nobos = run("tokenize -m " + kShared + "/models/ggml-vocab/ggml-vocab-llama-spm.gguf --ids-only --no-bos \"Hello world\"");
  EXPECT_EQ(nobos.out, "15043 3186\n");
}

TEST_F(Cli, TokenizeWorksOnTokenizerJson) {
  RunResult r = run("tokenize -m " + kShared + "/models/llama3-tokenizer/tokenizer.json --ids-only --no-bos \"Hello world\"");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "9906 1917\n");
}

TEST_F(Cli, SynthThenBenchModelReportsJson) {
  fs::path model = dir_ / "tiny-q8.gguf";
  RunResult s = run("synth --shape tiny --type q8_0 -o " + model.string());
  ASSERT_EQ(s.exit_code, 0) << s.err;
  RunResult b = run("bench-model -m " + model.string() + " -p 16 -n 4 -r 3 -t 2 --json");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto j = nlohmann::json::parse(b.out);
  EXPECT_GT(j.at("prompt_tokens_per_s").get<double>(), 0.0);
  // Every repeat is reported, and the headline figure is their median.
  std::vector<double> runs = j.at("prompt_tokens_per_s_runs").get<std::vector<double>>();
  ASSERT_EQ(runs.size(), 3u);
  std::sort(runs.begin(), runs.end());
  EXPECT_DOUBLE_EQ(j.at("prompt_tokens_per_s").get<double>(), runs[1]);
  EXPECT_EQ(j.at("gen_tokens_per_s_runs").size(), 3u);
  EXPECT_GT(j.at("gen_tokens_per_s").get<double>(), 0.0);
  EXPECT_GT(j.at("model_bytes").get<double>(), 0.0);
  // The tiny model's weights: about once (Q8_0 repacks byte for byte; f32 norms).
  EXPECT_GE(j.at("resident_weight_bytes").get<double>(), 0.95 * j.at("model_bytes").get<double>());
  EXPECT_LE(j.at("resident_weight_bytes").get<double>(), 1.05 * j.at("model_bytes").get<double>());
  EXPECT_GT(j.at("process_rss_bytes").get<double>(), 0.0);
  EXPECT_EQ(j.at("threads").get<int>(), 2);
  EXPECT_GT(j.at("decode_roofline_tokens_per_s").get<double>(), 0.0);
  // Each generation run against the probe passes around it: rate x step bytes / bandwidth,
  // and the headline is the median of the three.
  const auto gen = j.at("gen_tokens_per_s_runs").get<std::vector<double>>();
  const auto beside = j.at("read_bandwidth_beside_gen_runs").get<std::vector<double>>();
  auto paired = j.at("decode_roofline_fraction_paired_runs").get<std::vector<double>>();
  ASSERT_EQ(beside.size(), 3u);
  ASSERT_EQ(paired.size(), 3u);
  const double step_bytes = j.at("decode_step_bytes").get<double>();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_GT(beside[i], 0.0);
    EXPECT_NEAR(paired[i], gen[i] * step_bytes / beside[i], 1e-9 * paired[i]);
  }
  std::sort(paired.begin(), paired.end());
  EXPECT_DOUBLE_EQ(j.at("decode_roofline_fraction_paired").get<double>(), paired[1]);
}

// At a context depth the decode step also reads the context's K/V: the roofline counts it.
TEST_F(Cli, BenchModelAtAContextDepthCountsTheKvReadPerStep) {
  fs::path model = dir_ / "tiny-depth.gguf";
  ASSERT_EQ(run("synth --shape tiny --type q8_0 -o " + model.string()).exit_code, 0);
  RunResult b = run("bench-model -m " + model.string() + " -p 8 -n 4 -d 40 -r 1 -t 2 --json");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto j = nlohmann::json::parse(b.out);
  EXPECT_EQ(j.at("depth").get<int>(), 40);
  const double kv_per_token = j.at("kv_bytes_per_token").get<double>();
  ASSERT_GT(kv_per_token, 0.0);
  EXPECT_EQ(j.at("decode_step_bytes").get<uint64_t>(),
            j.at("decode_step_weight_bytes").get<uint64_t>() + static_cast<uint64_t>(kv_per_token * (40 + 4 / 2)));
  EXPECT_GT(j.at("gen_tokens_per_s").get<double>(), 0.0);
  RunResult bad = run("bench-model -m " + model.string() + " -d -1");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

TEST_F(Cli, SynthRejectsUnknownTypeAndShape) {
  RunResult t = run("synth --shape tiny --type iq3_s -o " + (dir_ / "x.gguf").string());
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_NE(t.err.find("iq3_s"), std::string::npos) << t.err;
  RunResult s = run("synth --shape gpt-5 -o " + (dir_ / "x.gguf").string());
  EXPECT_EQ(s.exit_code, 1);
}

// A hybrid model (qwen35): every repeat starts from the recurrent state at the depth (a
// forward that does not continue it is refused), and the step bytes count that state read
// and written back.
TEST_F(Cli, BenchModelOnAHybridModelRewindsItsStateEachRepeat) {
  fs::path model = dir_ / "q35.gguf";
  ASSERT_EQ(run("synth --arch qwen35 --shape tiny --type q8_0 -o " + model.string()).exit_code, 0);
  RunResult b = run("bench-model -m " + model.string() + " -p 8 -n 4 -d 20 -r 2 -t 2 --json");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto j = nlohmann::json::parse(b.out);
  EXPECT_EQ(j.at("gen_tokens_per_s_runs").size(), 2u);
  const uint64_t state = j.at("decode_step_state_bytes").get<uint64_t>();
  EXPECT_GT(state, 0u);
  const double kv_per_token = j.at("kv_bytes_per_token").get<double>();
  EXPECT_EQ(j.at("decode_step_bytes").get<uint64_t>(),
            j.at("decode_step_weight_bytes").get<uint64_t>() + static_cast<uint64_t>(kv_per_token * (20 + 4 / 2)) + state);
}

// Every architecture of the table through the binary: synth --arch X --shape tiny, then generate;
// phi3 with LongRoPE too, and LongRoPE refused where the architecture has none.
TEST_F(Cli, SynthEveryArchitectureTinyThenGenerate) {
  for (const char* arch : {"llama", "qwen2", "qwen3", "phi3", "qwen3moe", "mixtral", "olmoe", "qwen35", "qwen35moe"}) {
    const fs::path model = dir_ / (std::string(arch) + ".gguf");
    RunResult s = run(std::string("synth --arch ") + arch + " --shape tiny --type q8_0 -o " + model.string());
    ASSERT_EQ(s.exit_code, 0) << arch << ": " << s.err;
    RunResult r = run("generate -m " + model.string() + " -p \"hello\" -n 4 --temp 0 -t 2");
    EXPECT_EQ(r.exit_code, 0) << arch << ": " << r.err;
  }
  const fs::path lr = dir_ / "phi3-longrope.gguf";
  ASSERT_EQ(run("synth --arch phi3 --shape tiny --rope-scaling longrope -o " + lr.string()).exit_code, 0);
  RunResult i = run("inspect " + lr.string());
  EXPECT_NE(i.out.find("rope_factors_long.weight"), std::string::npos);
  EXPECT_NE(i.out.find("blk.0.attn_qkv.weight"), std::string::npos);
  EXPECT_EQ(run("generate -m " + lr.string() + " -p \"hello\" -n 4 --temp 0 -t 2 -c 64").exit_code, 0);
  RunResult bad = run("synth --arch qwen2 --shape tiny --rope-scaling longrope -o " + (dir_ / "x.gguf").string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("longrope"), std::string::npos) << bad.err;
}

TEST_F(Cli, GenerateOnSynthModelWithItsOwnVocabulary) {
  fs::path model = dir_ / "tiny.gguf";
  ASSERT_EQ(run("synth --shape tiny --type q4_0 -o " + model.string()).exit_code, 0);
  RunResult r = run("generate -m " + model.string() + " -p \"hello\" -n 8 --temp 0");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace

namespace {

TEST_F(Cli, BadKvFlagsNameTheFlagAndExitOne) {
  const std::string m = " -m " + kStories + " -p hi ";
  RunResult t = run("generate" + m + "--kv-type-k q7");
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_NE(t.err.find("--kv-type-k"), std::string::npos) << t.err;
  RunResult b = run("generate" + m + "--kv-block-size 12");
  EXPECT_EQ(b.exit_code, 1);
  EXPECT_NE(b.err.find("--kv-block-size"), std::string::npos) << b.err;
  RunResult s = run("generate" + m + "--kv-cache-bytes 12parsecs");
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_NE(s.err.find("--kv-cache-bytes"), std::string::npos) << s.err;
}

TEST_F(Cli, KvBudgetFullEndsGenerationWithLength) {
  if (!has_stories()) GTEST_SKIP();
  // 64 KiB holds 3 blocks of 32 tokens for stories260K (20 KiB each in f16).
  RunResult r = run("generate -m " + kStories + " -p \"Once upon a time\" -n 500 --temp 0 --kv-cache-bytes 64KiB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("generation: 92 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("finished by length"), std::string::npos) << r.err;
}

TEST_F(Cli, PromptLargerThanTheKvBudgetIsRefusedInOneLine) {
  if (!has_stories()) GTEST_SKIP();
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "Once upon a time there was a cat. ";
  RunResult r = run("generate -m " + kStories + " -p \"" + prompt + "\" --kv-cache-bytes 64KiB");
  EXPECT_EQ(r.exit_code, 1);
  const size_t at = r.err.find("pagoda: error:");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin() + at, r.err.end(), '\n'), 1) << r.err;
}

TEST_F(Cli, GenerateThroughQuantizedKvKeepsTheGreedyStoryStart) {
  if (!has_stories()) GTEST_SKIP();
  RunResult r = run("generate -m " + kStories + " -p \"Once upon a time\" -n 12 --temp 0 --kv-type-k q8 --kv-type-v q8 --kv-block-size 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(", there was a little girl named Lily.", 0), 0u) << r.out;
}

TEST_F(Cli, HugeTokenIdIsAOneLineErrorNotAnInternalError) {
  if (!has_stories()) GTEST_SKIP();
  RunResult r = run("logits -m " + kStories + " --tokens 1,99999999999999999999 --out " + (dir_ / "x.f32").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("out of range"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
}

}  // namespace
