// Gemma 4 (gemma4): what its GGUF layout reads as (the tiny synth's every feature), the
// one-line errors for inconsistent layouts, the KV cache's bytes per token with shared-KV
// layers counted once (against the formula, with and without windows), and the per-layer
// token embeddings read in place from the file mapping (RSS, not the model's accounting).
// The forward pass itself is checked against gemma4_numpy.py and llama.cpp
// (tests/model/numpy_reference_test.py, bench/peer_greedy.sh).
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/process_memory.h"
#include "common/thread_pool.h"
#include "gguf/gguf.h"
#include "kv/kv_layer_groups.h"
#include "kv/paged_kv_pool.h"
#include "kv/paged_kv_store.h"
#include "model/config.h"
#include "model/model.h"
#include "tools/synth.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using gguf::Value;

class Gemma4 : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_gemma4_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

SynthSpec tiny_spec() {
  SynthSpec s = *synth_shape("tiny");
  s.arch = "gemma4";
  return resolved_for_row(s, /*tiny_shape=*/true);
}

TEST_F(Gemma4, TheTinyShapeHasEveryFeatureAsLlamaCppReadsIt) {
  write_synthetic_model(tiny_spec(), path("tiny.gguf"));
  const gguf::GgufFile f = gguf::GgufFile::open(path("tiny.gguf"));
  const ModelConfig c = ModelConfig::from_gguf(f);
  EXPECT_EQ(c.arch, Arch::Gemma4);
  EXPECT_EQ(c.local_layers, (std::vector<uint8_t>{1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.head_dim_of(0), 32);
  EXPECT_EQ(c.head_dim_of(2), 64);
  EXPECT_EQ(c.kv_heads_of(0), 2);
  EXPECT_EQ(c.kv_heads_of(2), 1);
  EXPECT_EQ(c.rot_of(0), 32);
  EXPECT_EQ(c.rot_of(2), 64);  // all dims, rope_freqs.weight holding 3 of 4 pairs still
  // Layers 3-5 share: 3 and 4 (local) read layer 1, 5 (global) reads layer 2.
  EXPECT_EQ(c.n_kv_shared, 3);
  EXPECT_EQ(c.kv_source(3), 1);
  EXPECT_EQ(c.kv_source(4), 1);
  EXPECT_EQ(c.kv_source(5), 2);
  EXPECT_EQ(c.n_kv_layers(), 3);
  EXPECT_EQ(c.kv_layer(4), 1);
  EXPECT_EQ(c.kv_layer(5), 2);
  EXPECT_EQ(c.ffn_of(2), 256);
  EXPECT_EQ(c.ffn_of(3), 512);  // double width in the shared layers (E2B's use_double_wide_mlp)
  EXPECT_EQ(c.moe_layers, (std::vector<uint8_t>{0, 1, 0, 0, 1, 0}));
  EXPECT_TRUE(c.fused_gate_up_exps);
  EXPECT_EQ(c.v_from_k, (std::vector<uint8_t>{0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(c.per_layer_dim, 32);
  EXPECT_EQ(c.final_softcap, 30.0f);
  EXPECT_EQ(c.attention_scale(), 1.0f);
  EXPECT_EQ(c.rope_theta_local, 10000.0f);
  EXPECT_EQ(c.rms_eps, 1e-6f);
  for (const char* absent : {"blk.2.attn_v.weight", "blk.3.attn_k.weight", "blk.5.attn_v.weight",
                             "blk.0.ffn_gate_inp.weight", "output.weight"})
    EXPECT_EQ(f.find_tensor(absent), nullptr) << absent;
  for (const char* present : {"per_layer_token_embd.weight", "blk.4.ffn_gate_up_exps.weight",
                              "blk.4.ffn_down_exps.scale", "blk.5.layer_output_scale.weight", "rope_freqs.weight"})
    EXPECT_NE(f.find_tensor(present), nullptr) << present;
  const std::vector<KvLayerShape> kv = c.kv_layer_shapes();
  ASSERT_EQ(kv.size(), 3u);
  EXPECT_EQ(kv[2].window, 0);
  EXPECT_EQ(kv[2].shape, (KvSlotShape{1, 64}));
  EXPECT_EQ(kv[0].shape, (KvSlotShape{2, 32}));
}

// A metadata-only gemma4 GGUF: every key the reader needs, `edit` changing them, and a
// layer's attn_v (so a layer is not taken for a V-from-K one).
std::string write_metadata(const std::string& path, int64_t n_layers, int64_t period, int64_t shared,
                           const std::function<void(gguf::GgufWriter&)>& edit = {}) {
  gguf::GgufWriter w;
  w.set("general.architecture", Value::str("gemma4"));
  w.set("gemma4.embedding_length", Value::u32(256));
  w.set("gemma4.block_count", Value::u32(static_cast<uint32_t>(n_layers)));
  w.set("gemma4.feed_forward_length", Value::u32(512));
  w.set("gemma4.attention.head_count", Value::u32(8));
  w.set("gemma4.attention.head_count_kv", Value::u32(2));
  w.set("gemma4.attention.key_length", Value::u32(512));
  w.set("gemma4.attention.value_length", Value::u32(512));
  w.set("gemma4.attention.key_length_swa", Value::u32(256));
  w.set("gemma4.attention.value_length_swa", Value::u32(256));
  w.set("gemma4.rope.dimension_count", Value::u32(512));
  w.set("gemma4.rope.dimension_count_swa", Value::u32(256));
  w.set("gemma4.attention.sliding_window", Value::u32(512));
  std::vector<Value> pattern;
  for (int64_t l = 0; l < n_layers; ++l) pattern.push_back(Value::boolean((l + 1) % period != 0));
  w.set("gemma4.attention.sliding_window_pattern", Value::array(gguf::ValueType::BOOL, std::move(pattern)));
  w.set("gemma4.attention.shared_kv_layers", Value::u32(static_cast<uint32_t>(shared)));
  w.set("gemma4.embedding_length_per_layer_input", Value::u32(0));
  w.set("gemma4.vocab_size", Value::u32(1024));
  if (edit) edit(w);
  std::vector<float> one(16, 0.0f);
  for (int64_t l = 0; l < n_layers; ++l)
    w.add_tensor_f32("blk." + std::to_string(l) + ".attn_v.weight", GgmlType::F32, {16}, one.data());
  w.write(path);
  return path;
}

std::string load_error(const std::string& path) {
  try {
    (void)ModelConfig::from_gguf(gguf::GgufFile::open(path));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// synth --vocab-from a SentencePiece-style tokenizer.json writes a gemma4 file's vocabulary
// as llama.cpp's converter writes Gemma 4's ("gemma4" with merges, no space prefix; it was
// "llama" with scores, which a released Gemma 4 GGUF never is): Mistral 7B's file then
// encodes the texts of tests/tokenizer/gemma4_vocab_test.cpp to the ids the peer's
// llama-tokenize gave for that vocabulary.
TEST_F(Gemma4, SynthWritesATokenizerJsonAsAGemma4Vocabulary) {
  const std::string mistral = std::string(PAGODA_SHARED_DIR) + "/models/mistral-7b-v0.1-tokenizer/tokenizer.json";
  if (!fs::exists(mistral)) GTEST_SKIP() << mistral << " not found";
  SynthSpec s = tiny_spec();
  s.vocab_from = mistral;
  write_synthetic_model(s, path("vocab.gguf"));
  const gguf::GgufFile f = gguf::GgufFile::open(path("vocab.gguf"));
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), std::optional<std::string>("gemma4"));
  ASSERT_NE(f.get_array("tokenizer.ggml.merges"), nullptr);
  EXPECT_EQ(f.get_array("tokenizer.ggml.merges")->items.size(), 58980u);
  EXPECT_EQ(f.get_bool("tokenizer.ggml.add_space_prefix"), std::optional<bool>(false));
  const std::unique_ptr<Tokenizer> t = Tokenizer::from_gguf(f);
  EXPECT_TRUE(t->add_bos());
  struct Case {
    std::string text;
    std::vector<TokenId> ids;  // llama-tokenize --ids, BOS first
  };
  const std::vector<Case> cases = {
#include "tokenizer/gemma4_vocab_cases.inc"
  };
  ASSERT_FALSE(cases.empty());
  for (const Case& c : cases) EXPECT_EQ(t->encode(c.text, true, false), c.ids) << "'" << c.text << "'";
  // Other architectures keep the SentencePiece form.
  s = *synth_shape("tiny");
  s.vocab_from = mistral;
  write_synthetic_model(s, path("llama.gguf"));
  EXPECT_EQ(gguf::GgufFile::open(path("llama.gguf")).get_string("tokenizer.ggml.model"),
            std::optional<std::string>("llama"));
}

TEST_F(Gemma4, InconsistentLayoutsAreOneLineErrors) {
  struct BadCase {
    const char* name;
    int64_t n_layers, period, shared;
    std::function<void(gguf::GgufWriter&)> edit;
    const char* says;
  };
  const std::vector<BadCase> cases = {
      {"pattern-short", 6, 3, 0,
       [](gguf::GgufWriter& w) {
         w.set("gemma4.attention.sliding_window_pattern",
               Value::array(gguf::ValueType::BOOL, {Value::boolean(true), Value::boolean(false)}));
       },
       "attention.sliding_window_pattern has 2 entries for block_count 6"},
      {"pattern-not-bool", 6, 3, 0,
       [](gguf::GgufWriter& w) { w.set("gemma4.attention.sliding_window_pattern", Value::i32_array({1, 1, 2, 1, 1, 0})); },
       "attention.sliding_window_pattern holds 2 (each entry is a bool)"},
      {"pattern-missing", 6, 3, 0,
       [](gguf::GgufWriter& w) { w.set("gemma4.attention.sliding_window_pattern", Value::str("x")); },
       "is neither an integer nor an array"},
      {"window-zero", 6, 3, 0, [](gguf::GgufWriter& w) { w.set("gemma4.attention.sliding_window", Value::u32(0)); },
       "marks local layers but attention.sliding_window is 0"},
      {"kv-heads-array-short", 6, 3, 0,
       [](gguf::GgufWriter& w) { w.set("gemma4.attention.head_count_kv", Value::i32_array({2, 2, 1})); },
       "attention.head_count_kv has 3 entries for block_count 6"},
      {"ffn-array-short", 6, 3, 0,
       [](gguf::GgufWriter& w) { w.set("gemma4.feed_forward_length", Value::i32_array({512, 512})); },
       "feed_forward_length has 2 entries for block_count 6"},
      {"value-length-swa", 6, 3, 0,
       [](gguf::GgufWriter& w) { w.set("gemma4.attention.value_length_swa", Value::u32(128)); },
       "attention.value_length_swa 128 differs from key_length_swa 256"},
      {"rot-swa-too-wide", 6, 3, 0,
       [](gguf::GgufWriter& w) { w.set("gemma4.rope.dimension_count_swa", Value::u32(512)); },
       "rope.dimension_count_swa 512 must be even and <= key_length_swa 256"},
      // 2 shared of 6 (period 3): layer 4 (local) would read layer 2, which is global.
      {"shared-other-kind", 6, 3, 2, {},
       "shared layer 4 (local) would reuse the K/V of layer 2, a global layer (another head size and window)"},
      // Every layer shared: layer 0 would read layer -2, before it and without K/V.
      {"shared-points-forward", 6, 3, 6, {},
       "shared layer 0 (local) would reuse the K/V of layer -2, which is not an earlier layer with K/V of its own"},
      {"shared-too-many", 6, 3, 7, {}, "attention.shared_kv_layers 7 is outside [0, block_count 6]"},
  };
  for (const BadCase& bc : cases) {
    SCOPED_TRACE(bc.name);
    const std::string msg = load_error(write_metadata(path(std::string(bc.name) + ".gguf"), bc.n_layers, bc.period,
                                                      bc.shared, bc.edit));
    EXPECT_NE(msg.find(bc.says), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(bc.name), std::string::npos) << "names the file: " << msg;
  }
  // The same layout with sharing that reads its own kind loads (3 shared of 6: layers 3, 4
  // read local layer 1, layer 5 global layer 2).
  EXPECT_EQ(load_error(write_metadata(path("ok.gguf"), 6, 3, 3)), "(no error)");
}

// KV bytes one sequence holds at 8k context, from PoolStats, for E4B's KV geometry (42
// layers, every sixth global; 2 KV heads of 512 global / 256 local; window 512; the last
// 18 layers sharing): the shared layers take no KV, in either layout.
TEST_F(Gemma4, KvBytesPerTokenCountSharedLayersOnce) {
  const int64_t n = 8192;
  struct Layout {
    int64_t shared;
    bool swa_full;
  };
  for (const Layout lay : {Layout{18, true}, Layout{18, false}, Layout{0, true}, Layout{0, false}}) {
    SCOPED_TRACE("shared " + std::to_string(lay.shared) + (lay.swa_full ? ", windows full" : ", windows paged"));
    const ModelConfig c = ModelConfig::from_gguf(
        gguf::GgufFile::open(write_metadata(path("e4b.gguf"), 42, 6, lay.shared)));
    KvConfig kc;  // f16 K and V, block size 32
    kc.budget_bytes = 2ull << 30;
    kc.swa_full = lay.swa_full;
    const KvLayerGroups g = KvLayerGroups::for_layers(c.kv_layer_shapes(), kc.swa_full);
    PagedKvPool pool(KvGeometry{g.page_layers, c.n_kv_heads, c.head_dim, g.n_groups(), g.slot_shapes}, kc);
    PagedKvStore store(pool, g);
    ASSERT_TRUE(store.reserve(0, n).ok());
    store.release_out_of_window(0, n);
    const PoolStats s = pool.stats();
    // The formula: K and V of each layer with its own K/V, f16.
    const int64_t own = 42 - lay.shared, global = own / 6, local = own - global;
    const uint64_t per_token = static_cast<uint64_t>(global) * 2 * 2 * 512 * 2 + static_cast<uint64_t>(local) * 2 * 2 * 256 * 2;
    EXPECT_EQ(c.n_kv_layers(), own);
    if (lay.swa_full) {
      EXPECT_EQ(s.bytes_per_block, per_token * 32);
      EXPECT_EQ(s.bytes_in_use, per_token * n);
    } else {
      // Global layers hold all 256 blocks; each local group the window's blocks plus one
      // (positions from 8192 - 512 + 1 - 32 = 7649 on: blocks 239..255).
      const uint64_t page = static_cast<uint64_t>(global) * 2 * 2 * 512 * 2 * 32;
      const int64_t local_groups = g.n_groups() - 1;
      EXPECT_EQ(s.bytes_per_block, page);
      EXPECT_EQ(local_groups, (local + 2 * global - 1) / (2 * global));  // 2 * global local slots per page
      EXPECT_EQ(s.bytes_in_use, page * static_cast<uint64_t>(256 + local_groups * 17));
    }
    std::printf("gemma4-e4b KV at 8k, %2lld shared layers, %s: %.1f MiB, %.0f B/token\n",
                static_cast<long long>(lay.shared), lay.swa_full ? "--kv-swa-full" : "windows paged",
                s.bytes_in_use / 1048576.0, static_cast<double>(s.bytes_in_use) / n);
    store.remove(0);
  }
}

// The per-layer token embedding table stays in the file mapping: a forward pass faults in
// the rows of the tokens it reads, not the table. Here the table is 25.5 MiB of a 30 MiB
// model (Q8_0, vocab 16384 x 6 layers x 256); 8 neighbouring tokens read 13 KiB of it.
// Anonymous memory grows by the other weights' copies (no copy of the table); mapped file
// pages by what the reads fault in, which the kernel rounds up to whole page-cache folios
// (ext4 on 6.x kernels: tokens 1000 rows apart faulted 10.4 MiB for 8 rows), so the
// tokens are neighbours and the bound is 4 MiB, a sixth of the table.
TEST_F(Gemma4, PerLayerEmbeddingsAreReadInPlaceRowByRow) {
  SynthSpec s = tiny_spec();
  s.n_vocab = 16384;
  s.per_layer_dim = 256;
  s.type = GgmlType::Q8_0;
  write_synthetic_model(s, path("ple.gguf"));
  auto file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path("ple.gguf")));
  const gguf::TensorInfo* table = file->find_tensor("per_layer_token_embd.weight");
  ASSERT_NE(table, nullptr);
  malloc_trim(0);
  const ProcessMemory before = read_process_memory();
  ASSERT_TRUE(before.available);
  std::unique_ptr<Model> m = Model::load(file);
  const ModelConfig& c = m->config();
  KvConfig kc;
  kc.budget_bytes = 16 << 20;
  const KvLayerGroups g = KvLayerGroups::for_layers(c.kv_layer_shapes(), false);
  PagedKvPool pool(KvGeometry{g.page_layers, c.n_kv_heads, c.head_dim, g.n_groups(), g.slot_shapes}, kc);
  PagedKvStore store(pool, g);
  ASSERT_TRUE(store.reserve(0, 8).ok());
  Batch b;
  for (int t = 0; t < 8; ++t) b.add(5000 + t, t, 0, t == 7);
  ThreadPool threads(2);
  std::vector<float> logits;
  m->forward(b, store, threads, logits);
  const ProcessMemory after = read_process_memory();
  constexpr double kMiB = 1048576.0;
  const double anon = static_cast<double>(after.anon_bytes) - static_cast<double>(before.anon_bytes);
  const double mapped = static_cast<double>(after.file_bytes) - static_cast<double>(before.file_bytes);
  const double table_bytes = static_cast<double>(table->n_bytes);
  const double rest = static_cast<double>(m->resident_weight_bytes()) - table_bytes;
  std::printf("per-layer table %.1f MiB, other weights %.1f MiB; growth: anonymous %.1f MiB, file pages %.1f MiB\n",
              table_bytes / kMiB, rest / kMiB, anon / kMiB, mapped / kMiB);
  EXPECT_GT(table_bytes, 20.0 * kMiB);
  EXPECT_LT(anon, rest + 2.0 * kMiB);  // scratch, the pool's touched blocks, thread stacks
  EXPECT_LT(mapped, 4.0 * kMiB);
  store.remove(0);
}

}  // namespace
}  // namespace pagoda
