// Model loading rejects broken files with one clear line naming the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>

#include "common/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tools/synth.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

class ModelLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_model_load_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    base_ = (dir_ / "base.gguf").string();
    SynthSpec s = *synth_shape("tiny");
    s.dim = 64, s.ffn_dim = 96, s.n_vocab = 300;
    write_synthetic_model(s, base_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Copies base.gguf with `edit` applied to each (key, value) and tensor.
  std::string rewrite(const std::string& name,
                      const std::function<bool(std::string&, gguf::Value&)>& edit_kv,
                      const std::function<bool(gguf::TensorInfo&, std::vector<uint8_t>&)>& edit_tensor,
                      const std::string& src = "") {
    gguf::GgufFile f = gguf::GgufFile::open(src.empty() ? base_ : src);
    gguf::GgufWriter w;
    for (auto [key, value] : f.metadata())
      if (!edit_kv || edit_kv(key, value)) w.set(key, value);
    for (gguf::TensorInfo t : f.tensors()) {
      std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
      if (!edit_tensor || edit_tensor(t, bytes)) w.add_tensor(t.name, t.type, t.dims, bytes);
    }
    std::string path = (dir_ / name).string();
    w.write(path);
    return path;
  }

  std::string load_error(const std::string& path) {
    try {
      auto f = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
      Model::load(f);
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      return msg;
    }
    ADD_FAILURE() << "loading " << path << " did not fail";
    return "";
  }

  // A synthetic qwen3moe (4 experts, 2 used, expert width 32).
  std::string moe_base() {
    SynthSpec s = *synth_shape("tiny");
    s.arch = "qwen3moe";
    s.dim = 64, s.ffn_dim = 96, s.n_vocab = 300, s.n_expert = 4, s.n_expert_used = 2, s.expert_ffn_dim = 32;
    const std::string path = (dir_ / "moe.gguf").string();
    write_synthetic_model(s, path);
    return path;
  }

  fs::path dir_;
  std::string base_;
};

TEST_F(ModelLoad, ExpertCountsOutOfRangeOrMissingAreNamed) {
  const std::string moe = moe_base();
  auto used = rewrite("used.gguf", [](std::string& k, gguf::Value& v) {
    if (k == "qwen3moe.expert_used_count") v = gguf::Value::u32(5);
    return true;
  }, nullptr, moe);
  EXPECT_NE(load_error(used).find("expert_used_count 5 must be <= expert_count 4"), std::string::npos);
  auto no_count = rewrite("nocount.gguf", [](std::string& k, gguf::Value&) { return k != "qwen3moe.expert_count"; },
                          nullptr, moe);
  EXPECT_NE(load_error(no_count).find("qwen3moe.expert_count"), std::string::npos);
  auto no_ffn = rewrite("noffn.gguf", [](std::string& k, gguf::Value&) {
    return k != "qwen3moe.expert_feed_forward_length";
  }, nullptr, moe);
  EXPECT_NE(load_error(no_ffn).find("expert_feed_forward_length"), std::string::npos);
}

TEST_F(ModelLoad, ExpertTensorWithTooFewExpertsIsNamed) {
  const std::string moe = moe_base();
  // 3 experts' worth of a 4-expert tensor: shape and size agree, the count does not.
  auto p = rewrite("exps.gguf", nullptr, [](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
    if (t.name == "blk.1.ffn_down_exps.weight") {
      t.dims[2] = 3;
      bytes.resize(bytes.size() / 4 * 3);
    }
    return true;
  }, moe);
  const std::string msg = load_error(p);
  EXPECT_NE(msg.find("blk.1.ffn_down_exps.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected [32, 64, 4]"), std::string::npos) << msg;
}

TEST_F(ModelLoad, DenseArchitectureWithExpertsIsRejected) {
  auto p = rewrite("qwen2moe.gguf", [](std::string&, gguf::Value&) { return true; }, nullptr);
  gguf::GgufFile f = gguf::GgufFile::open(base_);
  gguf::GgufWriter w;
  for (auto [key, value] : f.metadata()) {
    if (key.rfind("llama.", 0) == 0) key = "qwen2." + key.substr(6);
    if (key == "general.architecture") value = gguf::Value::str("qwen2");
    w.set(key, value);
  }
  w.set("qwen2.expert_count", gguf::Value::u32(4));
  for (const gguf::TensorInfo& t : f.tensors()) w.add_tensor(t.name, t.type, t.dims, {t.data, t.data + t.n_bytes});
  w.write(p);
  EXPECT_NE(load_error(p).find("qwen2 with 4 experts (mixture of experts) is not supported"), std::string::npos);
}

TEST_F(ModelLoad, SyntheticModelLoads) {
  auto f = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(base_));
  auto m = Model::load(f);
  EXPECT_EQ(m->config().dim, 64);
  EXPECT_EQ(m->config().n_vocab, 300);
}

// synth's Q4_K_M mix: Q6_K for output.weight and for attn_v / ffn_down in llama.cpp's
// "more bits" layers (of 8: 0, 3, 6, 7), Q4_K elsewhere, file type 15; and it loads.
TEST_F(ModelLoad, SyntheticQ4KMMixPutsQ6KWhereLlamaCppDoes) {
  SynthSpec s = *synth_shape("tiny");
  s.dim = 256, s.ffn_dim = 512, s.n_vocab = 300, s.n_layers = 8;
  s.type = GgmlType::Q4_K;
  s.q4_k_m = true;
  const std::string path = (dir_ / "q4km.gguf").string();
  write_synthetic_model(s, path);
  auto f = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
  auto type_of = [&](const std::string& name) {
    const gguf::TensorInfo* t = f->find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? t->type : GgmlType::F32;
  };
  EXPECT_EQ(type_of("output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("token_embd.weight"), GgmlType::Q4_K);
  for (int i = 0; i < 8; ++i) {
    const bool more = i == 0 || i == 3 || i == 6 || i == 7;
    const std::string b = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(type_of(b + "attn_v.weight"), more ? GgmlType::Q6_K : GgmlType::Q4_K) << i;
    EXPECT_EQ(type_of(b + "ffn_down.weight"), more ? GgmlType::Q6_K : GgmlType::Q4_K) << i;
    EXPECT_EQ(type_of(b + "attn_q.weight"), GgmlType::Q4_K) << i;
    EXPECT_EQ(type_of(b + "ffn_up.weight"), GgmlType::Q4_K) << i;
  }
  EXPECT_EQ(f->find("general.file_type")->as_uint(), std::optional<uint64_t>(15));
  EXPECT_EQ(Model::load(f)->config().n_layers, 8);
  s.type = GgmlType::Q8_0;  // the mix is Q4_K's only
  EXPECT_THROW(write_synthetic_model(s, path), Error);
}

// --vocab-from sets the vocabulary size, and the embedding shapes follow it (they were
// once derived from the size given before the copy: [dim, 320] for a 512-token vocabulary).
TEST_F(ModelLoad, SyntheticModelWithACopiedVocabularyLoads) {
  const std::string stories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
  if (!fs::exists(stories)) GTEST_SKIP() << "no " << stories;
  SynthSpec s = *synth_shape("tiny");
  s.dim = 64, s.ffn_dim = 96;
  s.vocab_from = stories;
  const std::string path = (dir_ / "vocab.gguf").string();
  write_synthetic_model(s, path);
  auto f = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
  auto m = Model::load(f);
  EXPECT_EQ(m->config().n_vocab, 512);
}

TEST_F(ModelLoad, MissingTensorIsNamed) {
  auto p = rewrite("missing.gguf", nullptr, [](gguf::TensorInfo& t, auto&) { return t.name != "blk.1.ffn_up.weight"; });
  EXPECT_NE(load_error(p).find("blk.1.ffn_up.weight"), std::string::npos);
}

TEST_F(ModelLoad, WrongShapeIsNamedWithBothShapes) {
  auto p = rewrite("shape.gguf", nullptr, [](gguf::TensorInfo& t, std::vector<uint8_t>&) {
    if (t.name == "blk.0.attn_k.weight") t.dims = {t.dims[1], t.dims[0]};  // transposed
    return true;
  });
  std::string msg = load_error(p);
  EXPECT_NE(msg.find("blk.0.attn_k.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
}

TEST_F(ModelLoad, UnknownArchitectureIsRejected) {
  auto p = rewrite("arch.gguf", [](std::string& k, gguf::Value& v) {
    if (k == "general.architecture") v = gguf::Value::str("mamba");
    return true;
  }, nullptr);
  EXPECT_NE(load_error(p).find("mamba"), std::string::npos);
}

TEST_F(ModelLoad, MissingHyperParameterIsNamed) {
  auto p = rewrite("nokey.gguf", [](std::string& k, gguf::Value&) { return k != "llama.block_count"; }, nullptr);
  EXPECT_NE(load_error(p).find("llama.block_count"), std::string::npos);
}

TEST_F(ModelLoad, HeadsNotMultipleOfKvHeadsIsRejected) {
  auto p = rewrite("heads.gguf", [](std::string& k, gguf::Value& v) {
    if (k == "llama.attention.head_count_kv") v = gguf::Value::u32(3);
    return true;
  }, nullptr);
  EXPECT_NE(load_error(p).find("head_count_kv"), std::string::npos);
}

// Gemma's own keys and tensors: bad values are one line naming the key, a missing
// post-norm names the tensor; a gemma3 file without a window has no local layers, a
// gemma2 file without one gets llama.cpp's 4096.
TEST_F(ModelLoad, GemmaKeysAreCheckedAndDefaulted) {
  for (const std::string arch : {"gemma2", "gemma3"}) {
    SynthSpec s = *synth_shape("tiny");
    s.arch = arch;
    s.dim = 64, s.ffn_dim = 96, s.n_vocab = 300, s.n_layers = 6;
    if (arch == "gemma3") s.final_softcap = 5.0f;  // gemma3 writes the key only when capped
    write_synthetic_model(s, base_);
    auto set = [&](const std::string& key, gguf::Value value) {
      return rewrite("bad.gguf", [&](std::string& k, gguf::Value& v) {
        if (k == arch + "." + key) v = value;
        return true;
      }, nullptr);
    };
    EXPECT_NE(load_error(set("attention.sliding_window", gguf::Value::i32(-3))).find("sliding_window"),
              std::string::npos);
    EXPECT_NE(load_error(set("final_logit_softcapping", gguf::Value::f32(-1.0f))).find("final_logit_softcapping"),
              std::string::npos);
    if (arch == "gemma2") {
      EXPECT_NE(load_error(set("attn_logit_softcapping", gguf::Value::f32(-2.0f))).find("attn_logit_softcapping"),
                std::string::npos);
    }
    auto p = rewrite("nopost.gguf", nullptr,
                     [](gguf::TensorInfo& t, auto&) { return t.name != "blk.3.post_ffw_norm.weight"; });
    EXPECT_NE(load_error(p).find("blk.3.post_ffw_norm.weight"), std::string::npos);
    auto no_window = rewrite("nowin.gguf", [&](std::string& k, gguf::Value&) {
      return k != arch + ".attention.sliding_window";
    }, nullptr);
    const ModelConfig c = ModelConfig::from_gguf(gguf::GgufFile::open(no_window));
    EXPECT_EQ(c.sliding_window, arch == "gemma2" ? 4096 : 0);
    EXPECT_EQ(c.layer_is_local(0), arch == "gemma2");
    EXPECT_EQ(c.attn_softcap, arch == "gemma2" ? 50.0f : 0.0f);
    EXPECT_EQ(c.final_softcap, arch == "gemma2" ? 30.0f : 5.0f);
  }
}

// gpt-oss's own keys and tensors (synth's tiny gpt-oss: 4 layers, even ones local): a
// missing sink tensor names it; a sliding_window_pattern array must have one entry per
// block and mark exactly the layers llama.cpp makes local (it reads only a number there);
// a number is the period (0: every layer local); the window key is required; the head
// must be rotated whole. Each a one-line error.
TEST_F(ModelLoad, GptOssSinksAndWindowLayoutAreChecked) {
  SynthSpec s = resolved_for_row([] {
    SynthSpec t = *synth_shape("tiny");
    t.arch = "gpt-oss";
    return t;
  }(), /*tiny_shape=*/true);
  write_synthetic_model(s, base_);
  {
    const ModelConfig c = ModelConfig::from_gguf(gguf::GgufFile::open(base_));
    EXPECT_EQ(c.sliding_window, 16);
    EXPECT_TRUE(c.layer_is_local(0));
    EXPECT_FALSE(c.layer_is_local(1));
    EXPECT_TRUE(c.layer_is_local(2));
    EXPECT_EQ(c.rope_scaling, RopeScalingType::Yarn);
  }
  auto no_sinks = rewrite("nosinks.gguf", nullptr,
                          [](gguf::TensorInfo& t, auto&) { return t.name != "blk.1.attn_sinks.weight"; });
  EXPECT_NE(load_error(no_sinks).find("missing tensor 'blk.1.attn_sinks.weight'"), std::string::npos);
  auto with_key = [&](const std::string& key, gguf::Value value) {
    auto p = rewrite("key.gguf", nullptr, nullptr);
    gguf::GgufFile f = gguf::GgufFile::open(p);
    gguf::GgufWriter w;
    for (auto [k, v] : f.metadata()) w.set(k, v);
    w.set("gpt-oss." + key, value);
    for (gguf::TensorInfo t : f.tensors())
      w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    const std::string out = (dir_ / "withkey.gguf").string();
    w.write(out);
    return out;
  };
  const std::string bad_layer = load_error(with_key("attention.sliding_window_pattern",
                                                    gguf::Value::i32_array({1, 0, 0, 0})));
  EXPECT_NE(bad_layer.find("sliding_window_pattern marks layer 2 global"), std::string::npos) << bad_layer;
  const std::string bad_len = load_error(with_key("attention.sliding_window_pattern",
                                                  gguf::Value::i32_array({1, 0, 1})));
  EXPECT_NE(bad_len.find("has 3 entries for block_count 4"), std::string::npos) << bad_len;
  {  // the array llama.cpp's layout agrees with loads; a number sets the period
    auto agree = with_key("attention.sliding_window_pattern", gguf::Value::i32_array({1, 0, 1, 0}));
    EXPECT_TRUE(ModelConfig::from_gguf(gguf::GgufFile::open(agree)).layer_is_local(2));
    auto all_local = with_key("attention.sliding_window_pattern", gguf::Value::u32(0));
    const ModelConfig c = ModelConfig::from_gguf(gguf::GgufFile::open(all_local));
    for (int64_t l = 0; l < 4; ++l) EXPECT_TRUE(c.layer_is_local(l)) << l;
  }
  auto no_window = rewrite("nowin.gguf", [](std::string& k, gguf::Value&) {
    return k != "gpt-oss.attention.sliding_window";
  }, nullptr);
  EXPECT_NE(load_error(no_window).find("missing metadata key 'gpt-oss.attention.sliding_window'"), std::string::npos);
  const std::string part_rot = load_error(with_key("rope.dimension_count", gguf::Value::u32(16)));
  EXPECT_NE(part_rot.find("rope.dimension_count 16 differs from the head size 32"), std::string::npos) << part_rot;
}

// SmolLM3: every fourth layer without RoPE, no key involved (llama.cpp fixes it).
TEST_F(ModelLoad, SmolLm3SkipsRopeOnEveryFourthLayer) {
  SynthSpec s = *synth_shape("tiny");
  s.arch = "smollm3";
  s.dim = 64, s.ffn_dim = 96, s.n_vocab = 300, s.n_layers = 8;
  write_synthetic_model(s, base_);
  const ModelConfig c = ModelConfig::from_gguf(gguf::GgufFile::open(base_));
  for (int64_t l = 0; l < 8; ++l) EXPECT_EQ(c.layer_uses_rope(l), l != 3 && l != 7) << l;
}

TEST_F(ModelLoad, UnsupportedWeightTypeListsTheSupportedOnes) {
  // Q8_K (a known type, but activations only: 292 bytes per 256 values) in place of an
  // F32 matrix.
  auto p = rewrite("q8k.gguf", nullptr, [](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
    if (t.name == "blk.0.ffn_gate.weight") {
      // [64, 96] cannot be Q8_K (64 % 256 != 0); keep rows, widen to 256 columns.
      t.dims = {256, 96};
      t.type = GgmlType::Q8_K;
      bytes.assign(292 * 96, 0);
    }
    return true;
  });
  std::string msg = load_error(p);
  EXPECT_NE(msg.find("blk.0.ffn_gate.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("q8_K"), std::string::npos) << msg;
  EXPECT_NE(msg.find("q8_0"), std::string::npos) << msg;
}

// LongRoPE is marked by its two factor tensors (llama.cpp's rule); one alone is a broken file.
TEST_F(ModelLoad, Phi3WithOneLongRopeFactorTensorIsRejected) {
  SynthSpec s = *synth_shape("tiny");
  s.arch = "phi3", s.dim = 64, s.ffn_dim = 96, s.n_vocab = 300, s.rope_scaling = "longrope";
  write_synthetic_model(s, base_);
  auto f = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(base_));
  {
    auto m = Model::load(f);
    EXPECT_EQ(m->config().rope_scaling, RopeScalingType::LongRope);
    // Long factors once the context exceeds the original one (512 / 4 = 128), as llama.cpp.
    EXPECT_TRUE(m->uses_long_rope_factors());  // loaded for ctx_len 512
    m->set_context_size(128);
    EXPECT_FALSE(m->uses_long_rope_factors());
    m->set_context_size(129);
    EXPECT_TRUE(m->uses_long_rope_factors());
  }
  auto p = rewrite("one_factor.gguf", nullptr,
                   [](gguf::TensorInfo& t, auto&) { return t.name != "rope_factors_short.weight"; });
  EXPECT_NE(load_error(p).find("rope_factors_short.weight"), std::string::npos);
  auto q = rewrite("short_qkv.gguf", nullptr, [](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
    if (t.name == "blk.1.attn_qkv.weight") {  // one row short: [64, 127]
      t.dims[1] -= 1;
      bytes.resize(bytes.size() - 64 * 4);
    }
    return true;
  });
  const std::string msg = load_error(q);
  EXPECT_NE(msg.find("blk.1.attn_qkv.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected [64, 128]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace pagoda
