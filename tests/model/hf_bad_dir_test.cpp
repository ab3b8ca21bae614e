// Broken Hugging Face directories: each fault gives one pagoda::Error line that
// names the file and the problem (library), and `pagoda logits -m DIR` exits 1
// with that line (binary, when built), never a crash.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error.h"
#include "hf_fixture.h"
#include "model/hf_model.h"
#include "model/model.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void rewrite_json(const fs::path& p, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read(p));
  edit(j);
  test::write_text(p, j.dump());
}

// Replaces the header of a safetensors file (keeping its data section).
void rewrite_header(const fs::path& p, const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = read(p);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(bytes[i]);
  nlohmann::json h = nlohmann::json::parse(bytes.substr(8, len));
  edit(h);
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(text.size() >> (8 * i));
  test::write_text(p, out + text + bytes.substr(8 + len));
}

struct Case {
  const char* name;
  std::function<void(const fs::path&)> breaks;
  const char* file;     // the file the message must name
  const char* message;  // what it must say
  const char* model_type = "llama";  // the directory broken (phi3: fused tensors, LongRoPE)
};

const std::string kShard1 = "model-00001-of-00002.safetensors";
const std::string kShard2 = "model-00002-of-00002.safetensors";

std::vector<Case> cases() {
  return {
      {"MissingConfig", [](const fs::path& d) { fs::remove(d / "config.json"); }, "", "config.json is missing"},
      {"ConfigNotJson", [](const fs::path& d) { test::write_text(d / "config.json", "{\"model_type\": "); },
       "config.json", "not valid JSON"},
      {"UnknownModelType",
       [](const fs::path& d) { rewrite_json(d / "config.json", [](auto& j) { j["model_type"] = "gpt_neox"; }); },
       "config.json", "unsupported model_type 'gpt_neox'"},
      {"SmolLm3RopeLayersOtherThanEveryFourth",
       [](const fs::path& d) {
         rewrite_json(d / "config.json", [](auto& j) {
           j["model_type"] = "smollm3";
           j["no_rope_layers"] = {1, 0};  // layer 1 without RoPE: llama.cpp would rotate it
         });
       },
       "config.json", "no_rope_layers gives layer 1 no RoPE, but smollm3 leaves RoPE out on every 4th layer only"},
      {"MissingHiddenSize",
       [](const fs::path& d) { rewrite_json(d / "config.json", [](auto& j) { j.erase("hidden_size"); }); },
       "config.json", "'hidden_size' is missing"},
      {"BadRopeScaling",
       [](const fs::path& d) {
         rewrite_json(d / "config.json", [](auto& j) { j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}}; });
       },
       "config.json", "unsupported rope_scaling type 'dynamic'"},
      {"NoWeights",
       [](const fs::path& d) {
         fs::remove(d / "model.safetensors.index.json");
       },
       "", "no model.safetensors or model.safetensors.index.json"},
      {"IndexNamesMissingShard", [](const fs::path& d) { fs::remove(d / kShard2); },
       "model.safetensors.index.json", "shard 'model-00002-of-00002.safetensors'"},
      {"IndexNamesTensorNotInShard",
       [](const fs::path& d) {
         rewrite_json(d / "model.safetensors.index.json",
                      [](auto& j) { j["weight_map"]["model.norm.weight"] = kShard1; });
       },
       "model.safetensors.index.json", "which does not hold it"},
      {"TensorMissing",
       [](const fs::path& d) {
         rewrite_json(d / "model.safetensors.index.json",
                      [](auto& j) { j["weight_map"].erase("model.layers.1.mlp.up_proj.weight"); });
       },
       "", "tensor 'model.layers.1.mlp.up_proj.weight' is missing"},
      {"ShapeMismatch",
       [](const fs::path& d) { rewrite_json(d / "config.json", [](auto& j) { j["intermediate_size"] = 40; }); },
       "model-0000", "expected [40, 32] from config.json"},
      {"UnknownDtype",
       [](const fs::path& d) { rewrite_header(d / kShard1, [](auto& h) { h["model.embed_tokens.weight"]["dtype"] = "F12"; }); },
       kShard1.c_str(), "unknown dtype 'F12'"},
      {"UnsupportedDtype",
       [](const fs::path& d) {
         rewrite_header(d / kShard1, [](auto& h) {
           auto& e = h["model.embed_tokens.weight"];
           e["dtype"] = "I32";  // same byte size as F32
         });
       },
       kShard1.c_str(), "has dtype I32 (supported: F32, F16, BF16)"},
      {"HeaderLengthBeyondFile",
       [](const fs::path& d) {
         std::string b = read(d / kShard1);
         b[5] = 1;  // header length += 2^40
         test::write_text(d / kShard1, b);
       },
       kShard1.c_str(), "beyond the end of the file"},
      {"HeaderNotJson",
       [](const fs::path& d) {
         std::string b = read(d / kShard1);
         b[8] = '[';
         b[9] = '{';
         test::write_text(d / kShard1, b);
       },
       kShard1.c_str(), "header is not valid JSON"},
      {"OffsetsOutOfRange",
       [](const fs::path& d) {
         rewrite_header(d / kShard2, [](auto& h) {
           auto& o = h["lm_head.weight"]["data_offsets"];
           o[0] = o[0].template get<uint64_t>() + 4096;
           o[1] = o[1].template get<uint64_t>() + 4096;
         });
       },
       kShard2.c_str(), "out of range"},
      {"OffsetsOverlap",
       [](const fs::path& d) {
         rewrite_header(d / kShard1, [](auto& h) {
           const uint64_t b = h["model.embed_tokens.weight"]["data_offsets"][0].template get<uint64_t>();
           auto& o = h["model.layers.0.input_layernorm.weight"]["data_offsets"];
           const uint64_t n = o[1].template get<uint64_t>() - o[0].template get<uint64_t>();
           o = {b + 4, b + 4 + n};
         });
       },
       kShard1.c_str(), "overlap"},
      {"TruncatedShard",
       [](const fs::path& d) {
         std::string b = read(d / kShard2);
         test::write_text(d / kShard2, b.substr(0, b.size() - 100));
       },
       kShard2.c_str(), "out of range"},
      {"EmptyShard", [](const fs::path& d) { test::write_text(d / kShard1, ""); }, kShard1.c_str(), "empty"},
      {"Phi3LongRopeFactorCount",
       [](const fs::path& d) {
         rewrite_json(d / "config.json", [](auto& j) { j["rope_scaling"]["short_factor"] = {1.0}; });
       },
       "config.json", "short_factor has 1 entries, expected 4", "phi3"},
      {"Phi3LongRopeWithoutLongFactors",
       [](const fs::path& d) {
         rewrite_json(d / "config.json", [](auto& j) { j["rope_scaling"].erase("long_factor"); });
       },
       "config.json", "needs a 'long_factor' list", "phi3"},
      {"Phi3LongRopeNonPositiveFactor",
       [](const fs::path& d) {
         rewrite_json(d / "config.json", [](auto& j) { j["rope_scaling"]["long_factor"][0] = 0.0; });
       },
       "config.json", "long_factor holds something other than a positive number", "phi3"},
      {"Phi3YarnIsNotAccepted",
       [](const fs::path& d) {
         rewrite_json(d / "config.json", [](auto& j) { j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}}; });
       },
       "config.json", "unsupported rope_scaling type 'yarn' for phi3 (supported: default, longrope)", "phi3"},
      {"LlamaLongRopeIsNotAccepted",
       [](const fs::path& d) {
         rewrite_json(d / "config.json", [](auto& j) { j["rope_scaling"] = {{"type", "longrope"}}; });
       },
       "config.json", "unsupported rope_scaling type 'longrope' for llama"},
      {"Phi3OddPartialRotary",
       [](const fs::path& d) { rewrite_json(d / "config.json", [](auto& j) { j["partial_rotary_factor"] = 0.2; }); },
       "config.json", "partial_rotary_factor gives 1 rotary dims", "phi3"},
      {"Phi3FusedQkvShape",
       [](const fs::path& d) { rewrite_json(d / "config.json", [](auto& j) { j["num_key_value_heads"] = 4; }); },
       "model-0000", "expected [96, 32] from config.json", "phi3"},
      // Mixture of experts (qwen3_moe: 4 experts, 2 used, expert width 32).
      {"MoeWithoutNormTopkProb",
       [](const fs::path& d) { rewrite_json(d / "config.json", [](auto& j) { j["norm_topk_prob"] = false; }); },
       "config.json", "needs norm_topk_prob = true", "qwen3_moe"},
      {"MoeMoreExpertsUsedThanExist",
       [](const fs::path& d) { rewrite_json(d / "config.json", [](auto& j) { j["num_experts_per_tok"] = 9; }); },
       "config.json", "num_experts_per_tok 9 must be <= num_experts 4", "qwen3_moe"},
      {"OlmoeWithRenormalisedTopK",
       [](const fs::path& d) { rewrite_json(d / "config.json", [](auto& j) { j["norm_topk_prob"] = true; }); },
       "config.json", "needs norm_topk_prob = false", "olmoe"},
      {"MoeDenseLayersAmongExperts",
       [](const fs::path& d) { rewrite_json(d / "config.json", [](auto& j) { j["mlp_only_layers"] = {1}; }); },
       "config.json", "mlp_only_layers", "qwen3_moe"},
      {"MoeExpertTensorMissing",
       [](const fs::path& d) {
         rewrite_json(d / "model.safetensors.index.json",
                      [](auto& j) { j["weight_map"].erase("model.layers.1.mlp.experts.3.up_proj.weight"); });
       },
       "", "tensor 'model.layers.1.mlp.experts.3.up_proj.weight' is missing", "qwen3_moe"},
      {"MoeExpertShapeMismatch",
       [](const fs::path& d) { rewrite_json(d / "config.json", [](auto& j) { j["moe_intermediate_size"] = 40; }); },
       "model-0000", "expected [40, 32] from config.json", "qwen3_moe"},
  };
}

class HfBadDir : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_hf_bad_" + std::to_string(::getpid()) + "_" + GetParam().name);
    test::HfSpec s;
    s.vocab = 64;
    s.model_type = GetParam().model_type;
    if (s.model_type == "phi3") s.rope = "longrope";
    test::write_hf_dir(s, dir_);
    GetParam().breaks(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_P(HfBadDir, FailsWithOneLineNamingFileAndProblem) {
  const Case& c = GetParam();
  std::string msg;
  try {
    HfModelDir d = HfModelDir::open(dir_.string());
    Model::load(d.config, load_hf_weights(d));
  } catch (const Error& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << "loading did not fail";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find(c.file), std::string::npos) << msg;
  EXPECT_NE(msg.find(c.message), std::string::npos) << msg;

  // The binary: exit code 1 and the same line on stderr.
  const std::string bin = PAGODA_BINARY;
  if (!fs::exists(bin)) GTEST_SKIP() << "pagoda binary not built";
  const fs::path err = dir_.string() + ".stderr";
  const std::string cmd = bin + " logits -m '" + dir_.string() + "' --tokens 1,2 --out /dev/null 2>'" +
                          err.string() + "'";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << cmd;
  EXPECT_EQ(WEXITSTATUS(status), 1) << cmd;
  const std::string out = read(err);
  fs::remove(err);
  EXPECT_NE(out.find(c.message), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Matrix, HfBadDir, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(HfDir, GoodDirectoryLoadsFromOneFileToo) {
  const fs::path dir = fs::temp_directory_path() / ("pagoda_hf_single_" + std::to_string(::getpid()));
  test::HfSpec s;
  s.vocab = 64;
  s.n_shards = 1;
  s.dtype = GgmlType::F16;
  test::write_hf_dir(s, dir);
  HfModelDir d = HfModelDir::open(dir.string());
  auto w = load_hf_weights(d);
  // F16 views point into the mapping (no copy), except the permuted Q/K.
  EXPECT_EQ(w->find_tensor("blk.0.ffn_up.weight")->type, GgmlType::F16);
  auto m = Model::load(d.config, w);
  EXPECT_EQ(m->config().n_vocab, 64);
  EXPECT_EQ(d.generation.temperature, 0.6f);
  fs::remove_all(dir);
}

TEST(HfDir, ChatTemplateJinjaTakesPrecedenceAndListTemplatesPickDefault) {
  const fs::path dir = fs::temp_directory_path() / ("pagoda_hf_tmpl_" + std::to_string(::getpid()));
  test::HfSpec s;
  s.vocab = 64;
  test::write_hf_dir(s, dir);
  rewrite_json(dir / "tokenizer_config.json", [](auto& j) {
    j["chat_template"] = nlohmann::json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                {{"name", "default"}, {"template", "D"}}});
  });
  EXPECT_EQ(HfModelDir::open(dir.string()).chat_template, "D");
  test::write_text(dir / "chat_template.jinja", "J");
  EXPECT_EQ(HfModelDir::open(dir.string()).chat_template, "J");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagoda
