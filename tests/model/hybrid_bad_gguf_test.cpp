// Hybrid models (qwen35, qwen35moe) from broken files: every inconsistent linear-attention
// size, missing state or linear-attention tensor, bad shared-expert key or tensor is one
// pagoda::Error line naming the key or tensor, never a crash. Each case edits synth's
// tiny file of both architectures: dim 128; layers 0-2 Gated DeltaNet with Hk = 2 key and
// Hv = 4 value heads of d = 32 (conv channels 2 * 2 * 32 + 4 * 32 = 256, a 4-tap conv),
// layer 3 full attention, an MTP block 4; qwen35moe: 8 experts of width 64, a shared
// expert of width 96.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "common/error.h"
#include "common/thread_pool.h"
#include "gguf/gguf.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "tools/synth.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

using KvEdit = std::function<bool(std::string&, gguf::Value&)>;
using TensorEdit = std::function<bool(gguf::TensorInfo&, std::vector<uint8_t>&)>;

class HybridBadGguf : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_hybrid_bad_" + GetParam() + "_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    base_ = (dir_ / "base.gguf").string();
    SynthSpec s;
    s.arch = GetParam();
    s = resolved_for_row(s, /*tiny_shape=*/true);
    s.n_vocab = 300;
    write_synthetic_model(s, base_);
    prefix_ = GetParam() + ".";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A copy of `src` (default the tiny file) with `edit_kv` / `edit_tensor` applied to each
  // key and tensor (false: drop it) and the keys `add` added, as a new file.
  std::string rewrite(const KvEdit& edit_kv, const TensorEdit& edit_tensor, const std::string& src = "",
                      const std::vector<std::pair<std::string, gguf::Value>>& add = {}) {
    const std::string path = (dir_ / ("edit" + std::to_string(n_files_++) + ".gguf")).string();
    gguf::GgufFile f = gguf::GgufFile::open(src.empty() ? base_ : src);
    gguf::GgufWriter w;
    for (auto [key, value] : f.metadata())
      if (!edit_kv || edit_kv(key, value)) w.set(key, value);
    for (const auto& [key, value] : add) w.set(key, value);
    for (gguf::TensorInfo t : f.tensors()) {
      std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
      if (!edit_tensor || edit_tensor(t, bytes)) w.add_tensor(t.name, t.type, t.dims, bytes);
    }
    w.write(path);
    return path;
  }

  // The key `key` (without the architecture prefix) set to `v` (added if synth does not
  // write it), or dropped when v is empty.
  std::string with_key(const std::string& key, std::optional<gguf::Value> v, const std::string& src = "") {
    const std::string full = prefix_ + key;
    bool seen = false;
    const std::string p = rewrite([&](std::string& k, gguf::Value& value) {
      if (k != full) return true;
      seen = true;
      if (!v) return false;
      value = *v;
      return true;
    }, nullptr, src);
    EXPECT_TRUE(seen || v) << full << " is not in the file";
    return seen || !v ? p : rewrite(nullptr, nullptr, p, {{full, *v}});
  }

  // Tensor `name` dropped.
  std::string without(const std::string& name) {
    bool seen = false;
    const std::string p = rewrite(nullptr, [&](gguf::TensorInfo& t, auto&) {
      seen = seen || t.name == name;
      return t.name != name;
    });
    EXPECT_TRUE(seen) << name << " is not in the file";
    return p;
  }

  // F32 tensor `name` with ggml dims `dims`, filled with `value` (its old values where they fit).
  std::string reshaped(const std::string& name, std::vector<int64_t> dims, float value = 0.5f) {
    bool seen = false;
    const std::string p = rewrite(nullptr, [&](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
      if (t.name != name) return true;
      seen = true;
      EXPECT_EQ(t.type, GgmlType::F32) << name;
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      const size_t old = bytes.size();
      bytes.resize(static_cast<size_t>(n) * 4);
      for (size_t i = old / 4; i < bytes.size() / 4; ++i) std::memcpy(&bytes[4 * i], &value, 4);
      t.dims = dims;
      return true;
    });
    EXPECT_TRUE(seen) << name << " is not in the file";
    return p;
  }

  // F32 tensor `name` with its element `i` set to `value`.
  std::string poisoned(const std::string& name, size_t i, float value) {
    return rewrite(nullptr, [&](gguf::TensorInfo& t, std::vector<uint8_t>& bytes) {
      if (t.name == name) std::memcpy(&bytes[4 * i], &value, 4);
      return true;
    });
  }

  // Loading `path` fails with one line containing `what` (a key or tensor name).
  void expect_error_naming(const std::string& path, const std::string& what) {
    try {
      auto f = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
      Model::load(f);
      ADD_FAILURE() << "loading did not fail (wanted an error naming " << what << ")";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << "wanted " << what << " in: " << msg;
    }
  }

  fs::path dir_;
  std::string base_;
  std::string prefix_;
  int n_files_ = 0;
};

TEST_P(HybridBadGguf, TheTinyFileLoads) {
  auto f = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(base_));
  const std::unique_ptr<Model> m = Model::load(f);
  EXPECT_EQ(m->config().n_recurrent_layers(), 3);
  EXPECT_EQ(m->config().ssm_conv_dim(), 256);
}

TEST_P(HybridBadGguf, AConvolutionThatDoesNotFitTheQkvChannelsIsNamed) {
  // One tap more than ssm.conv_kernel; one channel short of attn_qkv's 256 rows.
  expect_error_naming(reshaped("blk.1.ssm_conv1d.weight", {5, 256}), "blk.1.ssm_conv1d.weight");
  expect_error_naming(reshaped("blk.1.ssm_conv1d.weight", {4, 255}), "blk.1.ssm_conv1d.weight");
  // attn_qkv itself one head short of the convolution's channels.
  expect_error_naming(reshaped("blk.0.attn_qkv.weight", {128, 224}), "blk.0.attn_qkv.weight");
}

TEST_P(HybridBadGguf, PerHeadTensorsOfTheWrongLengthAreNamed) {
  expect_error_naming(reshaped("blk.0.ssm_a", {3}, -1.0f), "blk.0.ssm_a");  // 3 of 4 value heads
  expect_error_naming(reshaped("blk.2.ssm_dt.bias", {5}), "blk.2.ssm_dt.bias");
  expect_error_naming(reshaped("blk.0.ssm_beta.weight", {128, 3}), "blk.0.ssm_beta.weight");
  expect_error_naming(reshaped("blk.1.ssm_alpha.weight", {128, 8}), "blk.1.ssm_alpha.weight");
  expect_error_naming(reshaped("blk.0.ssm_norm.weight", {16}), "blk.0.ssm_norm.weight");  // state 16, not 32
  expect_error_naming(reshaped("blk.2.attn_gate.weight", {128, 96}), "blk.2.attn_gate.weight");
  expect_error_naming(reshaped("blk.1.ssm_out.weight", {96, 128}), "blk.1.ssm_out.weight");
  // The attention layer's q without its gate rows (a plain q_dim projection).
  expect_error_naming(reshaped("blk.3.attn_q.weight", {128, 128}), "blk.3.attn_q.weight");
}

TEST_P(HybridBadGguf, EveryMissingStateOrLinearAttentionTensorIsNamed) {
  for (const char* t : {"attn_qkv.weight", "attn_gate.weight", "ssm_conv1d.weight", "ssm_dt.bias", "ssm_a",
                        "ssm_beta.weight", "ssm_alpha.weight", "ssm_norm.weight", "ssm_out.weight"}) {
    const std::string name = "blk.1." + std::string(t);
    SCOPED_TRACE(name);
    expect_error_naming(without(name), "missing tensor '" + name + "'");
  }
  for (const char* t : {"attn_q.weight", "attn_q_norm.weight", "attn_k_norm.weight", "attn_output.weight"}) {
    const std::string name = "blk.3." + std::string(t);
    SCOPED_TRACE(name);
    expect_error_naming(without(name), "missing tensor '" + name + "'");
  }
}

TEST_P(HybridBadGguf, DecaysThatAreNotDecaysAndNonFiniteStateWeightsAreNamed) {
  expect_error_naming(poisoned("blk.0.ssm_a", 2, 0.25f), "blk.0.ssm_a");  // -exp(A_log) must be <= 0
  expect_error_naming(poisoned("blk.1.ssm_a", 0, std::numeric_limits<float>::quiet_NaN()), "blk.1.ssm_a");
  expect_error_naming(poisoned("blk.2.ssm_conv1d.weight", 17, std::numeric_limits<float>::infinity()),
                      "blk.2.ssm_conv1d.weight");
  expect_error_naming(poisoned("blk.0.ssm_dt.bias", 1, std::numeric_limits<float>::quiet_NaN()), "blk.0.ssm_dt.bias");
}

TEST_P(HybridBadGguf, InconsistentOrMissingSsmKeysAreNamed) {
  using V = gguf::Value;
  // The state size alone: ssm.inner_size no longer Hv x d.
  expect_error_naming(with_key("ssm.state_size", V::u32(16)), "ssm.inner_size");
  // State size and inner size changed together: consistent keys, the tensors then disagree.
  expect_error_naming(with_key("ssm.inner_size", V::u32(64), with_key("ssm.state_size", V::u32(16))),
                      "blk.0.attn_qkv.weight");
  expect_error_naming(with_key("ssm.time_step_rank", V::u32(8)), "ssm.inner_size");  // 8 x 32 != 128
  expect_error_naming(with_key("ssm.group_count", V::u32(3)), "ssm.group_count");   // 4 % 3
  expect_error_naming(with_key("ssm.conv_kernel", V::u32(1)), "ssm.conv_kernel");
  expect_error_naming(with_key("ssm.conv_kernel", V::u32(100)), "ssm.conv_kernel");
  expect_error_naming(with_key("ssm.conv_kernel", V::u32(3)), "blk.0.ssm_conv1d.weight");
  expect_error_naming(with_key("ssm.state_size", V::u32(1u << 20)), "ssm.inner_size");
  expect_error_naming(with_key("ssm.group_count", V::u32(0)), "ssm.group_count");
  for (const char* k : {"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size"}) {
    SCOPED_TRACE(k);
    expect_error_naming(with_key(k, std::nullopt), prefix_ + k);
  }
}

TEST_P(HybridBadGguf, ALayerLayoutThatDoesNotFitTheFileIsNamed) {
  using V = gguf::Value;
  // Five blocks (4 trunk + MTP): an array of 4 flags is one short.
  expect_error_naming(with_key("attention.recurrent_layers", V::i32_array({1, 1, 1, 0})),
                      "attention.recurrent_layers");
  expect_error_naming(with_key("attention.recurrent_layers", V::str_array({"a", "b", "c", "d", "e"})),
                      "attention.recurrent_layers");
  // Every trunk layer linear: no attention layer left.
  expect_error_naming(with_key("full_attention_interval", V::u32(100)), "full_attention_interval");
  // Layer 1 declared full attention: the file has its DeltaNet tensors, not attention ones.
  expect_error_naming(with_key("attention.recurrent_layers", V::i32_array({1, 0, 1, 0, 0})),
                      "missing tensor 'blk.1.attn_q");
  expect_error_naming(with_key("nextn_predict_layers", V::u32(5)), "nextn_predict_layers");
}

TEST_P(HybridBadGguf, SharedExpertKeysAndTensorsAreChecked) {
  if (GetParam() != "qwen35moe") GTEST_SKIP() << "no shared expert";
  using V = gguf::Value;
  // Without its width (and no feed_forward_length to default it to).
  expect_error_naming(with_key("expert_shared_feed_forward_length", std::nullopt), "expert_shared_feed_forward_length");
  expect_error_naming(with_key("expert_shared_feed_forward_length", V::u32(64)), "blk.0.ffn_gate_shexp.weight");
  expect_error_naming(with_key("expert_feed_forward_length", std::nullopt), "expert_feed_forward_length");
  expect_error_naming(with_key("expert_count", V::u32(0)), "expert_count");
  expect_error_naming(with_key("expert_used_count", V::u32(9)), "expert_used_count");
  for (const char* t : {"ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
                        "ffn_down_shexp.weight", "ffn_gate_inp.weight", "ffn_down_exps.weight"}) {
    const std::string name = "blk.2." + std::string(t);
    SCOPED_TRACE(name);
    expect_error_naming(without(name), "missing tensor '" + name + "'");
  }
  // The shared expert's gate is one [dim] vector (llama.cpp's {n_embd}); [dim, 2] is not.
  expect_error_naming(reshaped("blk.0.ffn_gate_inp_shexp.weight", {128, 2}), "blk.0.ffn_gate_inp_shexp.weight");
  expect_error_naming(poisoned("blk.1.ffn_gate_inp_shexp.weight", 3, std::numeric_limits<float>::quiet_NaN()),
                      "blk.1.ffn_gate_inp_shexp.weight");
}

// What llama.cpp also reads, and is not an error: ffn_gate_inp_shexp stored [dim, 1] (HF's
// Linear(dim, 1)); a qwen35moe file with feed_forward_length and no expert widths, which
// llama.cpp sizes as feed_forward_length / expert_used_count (routed) and
// feed_forward_length (shared).
TEST_P(HybridBadGguf, SharedExpertWidthsFallBackAsLlamaCppReadsThem) {
  if (GetParam() != "qwen35moe") GTEST_SKIP() << "no shared expert";
  using V = gguf::Value;
  {
    auto f = std::make_shared<const gguf::GgufFile>(
        gguf::GgufFile::open(reshaped("blk.0.ffn_gate_inp_shexp.weight", {128, 1})));
    EXPECT_NO_THROW(Model::load(f));
  }
  // expert_used_count 3: 192 / 3 = 64 (the routed width); the shared one becomes 192,
  // which the file's 96-wide shared expert does not fit.
  const std::string no_widths = rewrite([&](std::string& k, gguf::Value&) {
    return k != prefix_ + "expert_feed_forward_length" && k != prefix_ + "expert_shared_feed_forward_length";
  }, nullptr, with_key("feed_forward_length", V::u32(192)));
  {
    const gguf::GgufFile f = gguf::GgufFile::open(no_widths);
    const ModelConfig c = ModelConfig::from_gguf(f);
    EXPECT_EQ(c.expert_ffn_dim, 64);
    EXPECT_EQ(c.shared_expert_ffn_dim, 192);
  }
  expect_error_naming(no_widths, "blk.0.ffn_gate_shexp.weight");
}

// The architecture's integer keys (sizes, counts, layouts) set to random small, boundary
// and huge values, one to three at a time: each file fails to load with one line, or
// loads and runs a forward pass of 6 tokens in two calls (through the recurrent states).
TEST_P(HybridBadGguf, RandomSizeKeysLoadAndRunOrFailWithOneLine) {
  std::vector<std::string> keys;
  {
    const gguf::GgufFile f = gguf::GgufFile::open(base_);
    for (const auto& [k, v] : f.metadata())
      if (k.rfind(prefix_, 0) == 0 && v.as_int()) keys.push_back(k);
  }
  ASSERT_GE(keys.size(), 12u);
  const uint32_t values[] = {0, 1, 2, 3, 4, 5, 7, 8, 16, 31, 32, 33, 64, 96, 127, 128, 255, 256, 1u << 20, 0xFFFFFFFFu};
  std::mt19937 rng(33);
  int loaded = 0, failed = 0;
  for (int iter = 0; iter < 150; ++iter) {
    std::map<std::string, uint32_t> set;
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) set[keys[rng() % keys.size()]] = values[rng() % std::size(values)];
    std::string trace;
    for (const auto& [k, v] : set) trace += k + "=" + std::to_string(v) + " ";
    SCOPED_TRACE(trace);
    const std::string path = rewrite([&](std::string& k, gguf::Value& value) {
      if (auto it = set.find(k); it != set.end()) value = gguf::Value::u32(it->second);
      return true;
    }, nullptr);
    std::unique_ptr<Model> m;
    try {
      m = Model::load(std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path)));
    } catch (const Error& e) {
      ++failed;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      fs::remove(path);
      continue;
    }
    ++loaded;
    const ModelConfig& c = m->config();
    ContiguousKvCache kv(c.n_attention_layers(), c.n_kv_heads, c.head_dim, 16, 1);
    configure_recurrent_states(c, *kv.recurrent());
    ThreadPool pool(1);
    std::vector<float> logits;
    for (int64_t t0 : {0, 4}) {
      Batch b;
      for (int64_t t = t0; t < std::min<int64_t>(t0 + 4, 6); ++t)
        b.add(static_cast<int32_t>((t * 37 + 5) % c.n_vocab), t, 0, true);
      try {
        m->forward(b, kv, pool, logits);
      } catch (const Error& e) {  // e.g. a context length below 6
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        break;
      }
      EXPECT_EQ(logits.size(), b.size() * static_cast<size_t>(c.n_vocab));
    }
    fs::remove(path);
  }
  std::printf("%d files loaded and ran, %d refused\n", loaded, failed);
  EXPECT_GT(loaded, 0);  // the keys that do not change a shape (context, rope) leave it loadable
  EXPECT_GT(failed, 0);
}

INSTANTIATE_TEST_SUITE_P(Archs, HybridBadGguf, ::testing::Values("qwen35", "qwen35moe"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace pagoda
