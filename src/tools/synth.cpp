#include "tools/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/arch_table.h"
#include "model/config.h"
#include "tensor/file_type.h"
#include "tools/hf_convert.h"
#include "tools/synth_random.h"

namespace pagoda {

using synth_random::fill;
using synth_random::norm_weights;
using synth_random::Rng;

std::string synth_arch_names() {
  std::string s;
  for (const ArchInfo& r : arch_table()) s += (s.empty() ? "" : ", ") + std::string(r.name());
  return s;
}

std::vector<std::string> synth_shape_names() {
  return {"tinyllama-1.1b", "llama3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b",   "phi3.5-mini",  "gemma2-2b",
          "gemma3-1b",      "gemma3-4b",   "qwen3-30b-a3b", "mixtral-8x7b", "qwen3.5-0.8b", "qwen3.5-4b",
          "qwen3.5-27b",    "qwen3.6-35b-a3b", "smollm3-3b",  "gpt-oss-20b",   "gpt-oss-120b", "gemma4-e2b",
          "gemma4-e4b",     "gemma4-26b-a4b", "gemma4-31b", "stories260k",  "tiny"};
}

std::optional<SynthSpec> synth_shape(const std::string& name) {
  SynthSpec s;
  if (name == "tinyllama-1.1b") {
    s.dim = 2048, s.n_layers = 22, s.n_heads = 32, s.n_kv_heads = 4, s.ffn_dim = 5632, s.n_vocab = 32000;
    s.ctx_len = 2048;
  } else if (name == "llama3.2-1b") {
    s.dim = 2048, s.n_layers = 16, s.n_heads = 32, s.n_kv_heads = 8, s.ffn_dim = 8192, s.n_vocab = 128256;
    s.ctx_len = 131072, s.rope_scaling = "llama3";
  } else if (name == "qwen2.5-0.5b") {
    s.arch = "qwen2";
    s.dim = 896, s.n_layers = 24, s.n_heads = 14, s.n_kv_heads = 2, s.ffn_dim = 4864, s.n_vocab = 151936;
    s.ctx_len = 32768;
  } else if (name == "qwen3-0.6b") {
    s.arch = "qwen3";
    s.dim = 1024, s.n_layers = 28, s.n_heads = 16, s.n_kv_heads = 8, s.head_dim = 128, s.ffn_dim = 3072;
    s.n_vocab = 151936, s.ctx_len = 40960;
  } else if (name == "phi3.5-mini") {
    s.arch = "phi3";
    s.dim = 3072, s.n_layers = 32, s.n_heads = 32, s.n_kv_heads = 32, s.ffn_dim = 8192, s.n_vocab = 32064;
    s.ctx_len = 131072, s.rope_scaling = "longrope";
  } else if (name == "gemma2-2b") {
    s.arch = "gemma2";
    s.dim = 2304, s.n_layers = 26, s.n_heads = 8, s.n_kv_heads = 4, s.head_dim = 256, s.ffn_dim = 9216;
    s.n_vocab = 256000, s.ctx_len = 8192, s.sliding_window = 4096;
  } else if (name == "gemma3-1b") {
    s.arch = "gemma3";
    s.dim = 1152, s.n_layers = 26, s.n_heads = 4, s.n_kv_heads = 1, s.head_dim = 256, s.ffn_dim = 6912;
    s.n_vocab = 262144, s.ctx_len = 32768, s.sliding_window = 512;
  } else if (name == "gemma3-4b") {  // the text model of Gemma 3 4B
    s.arch = "gemma3";
    s.dim = 2560, s.n_layers = 34, s.n_heads = 8, s.n_kv_heads = 4, s.head_dim = 256, s.ffn_dim = 10240;
    s.n_vocab = 262208, s.ctx_len = 131072, s.sliding_window = 1024, s.rope_scaling = "linear";
  } else if (name == "qwen3-30b-a3b") {
    s.arch = "qwen3moe";
    s.dim = 2048, s.n_layers = 48, s.n_heads = 32, s.n_kv_heads = 4, s.head_dim = 128, s.ffn_dim = 6144;
    s.n_expert = 128, s.n_expert_used = 8, s.expert_ffn_dim = 768;
    s.n_vocab = 151936, s.ctx_len = 40960;
  } else if (name == "mixtral-8x7b") {
    s.arch = "mixtral";
    s.dim = 4096, s.n_layers = 32, s.n_heads = 32, s.n_kv_heads = 8, s.ffn_dim = 14336;
    s.n_expert = 8, s.n_expert_used = 2;
    s.n_vocab = 32000, s.ctx_len = 32768;
  } else if (name == "qwen3.5-0.8b" || name == "qwen3.5-4b" || name == "qwen3.5-27b") {
    // Qwen 3.5 (config.json of the released models): head_dim 256 with a quarter rotary
    // (n_rot 64), Gated DeltaNet heads of 128 with a 4-tap convolution, one full-attention
    // layer in four, one MTP block, rope_theta 1e7, tied embeddings on the small ones.
    s.arch = "qwen35";
    s.head_dim = 256, s.ssm_head_dim = 128, s.ssm_conv_kernel = 4, s.n_nextn = 1;
    s.n_vocab = 248320, s.ctx_len = 262144;
    if (name == "qwen3.5-0.8b") {
      s.dim = 1024, s.n_layers = 24, s.n_heads = 8, s.n_kv_heads = 2, s.ffn_dim = 3584;
      s.ssm_k_heads = 16, s.ssm_v_heads = 16, s.tied_embeddings = true;
    } else if (name == "qwen3.5-4b") {
      s.dim = 2560, s.n_layers = 32, s.n_heads = 16, s.n_kv_heads = 4, s.ffn_dim = 9216;
      s.ssm_k_heads = 16, s.ssm_v_heads = 32, s.tied_embeddings = true;
    } else {
      s.dim = 5120, s.n_layers = 64, s.n_heads = 24, s.n_kv_heads = 4, s.ffn_dim = 17408;
      s.ssm_k_heads = 16, s.ssm_v_heads = 48;
    }
  } else if (name == "qwen3.6-35b-a3b") {
    // Qwen3.6-35B-A3B (the same text model as Qwen3.5-35B-A3B; its model card and
    // config.json): dim 2048, 40 layers (10 x (3 Gated DeltaNet + 1 gated attention)),
    // attention 16 query / 2 KV heads of 256 with a quarter rotary (64), DeltaNet 16 key /
    // 32 value heads of 128 with a 4-tap conv, 256 experts of width 512 of which 8 are
    // used plus a shared expert of width 512, one MTP block, untied output.
    s.arch = "qwen35moe";
    s.dim = 2048, s.n_layers = 40, s.n_heads = 16, s.n_kv_heads = 2, s.head_dim = 256, s.ffn_dim = 512;
    s.ssm_head_dim = 128, s.ssm_k_heads = 16, s.ssm_v_heads = 32, s.ssm_conv_kernel = 4, s.n_nextn = 1;
    s.n_expert = 256, s.n_expert_used = 8, s.expert_ffn_dim = 512, s.shared_expert_ffn_dim = 512;
    s.n_vocab = 248320, s.ctx_len = 262144;
  } else if (name == "smollm3-3b") {
    // SmolLM3-3B's config.json: rope_theta 5e6, 64k context, tied embeddings.
    s.arch = "smollm3";
    s.dim = 2048, s.n_layers = 36, s.n_heads = 16, s.n_kv_heads = 4, s.ffn_dim = 11008, s.n_vocab = 128256;
    s.ctx_len = 65536, s.tied_embeddings = true;
  } else if (name == "gpt-oss-20b" || name == "gpt-oss-120b") {
    // gpt-oss's config.json: 64 heads of 64 (q_dim 4096 > dim 2880), 8 KV heads, experts of
    // width 2880 (4 used), vocab 201088, 128-token windows on every other layer, YaRN 32 over
    // an original 4096 (131072 context), rope_theta 150000 (the row's synth defaults).
    s.arch = "gpt-oss";
    s.dim = 2880, s.n_heads = 64, s.n_kv_heads = 8, s.head_dim = 64, s.ffn_dim = 2880, s.expert_ffn_dim = 2880;
    s.n_expert_used = 4, s.n_vocab = 201088, s.ctx_len = 131072, s.sliding_window = 128;
    s.n_layers = name == "gpt-oss-20b" ? 24 : 36;
    s.n_expert = name == "gpt-oss-20b" ? 32 : 128;
  } else if (name.starts_with("gemma4-")) {
    // Gemma 4 (text_config of the released config.json files, google/gemma-4-*): local
    // heads of 256 and global heads of 512 with a quarter of the global dims rotated,
    // rope bases 10000 / 1e6, final soft-cap 30 (the row's default when written), tied.
    s.arch = "gemma4";
    s.head_dim = 512, s.head_dim_local = 256, s.n_vocab = 262144, s.tied_embeddings = true;
    s.final_softcap = 30.0f;
    if (name == "gemma4-e2b") {
      s.dim = 1536, s.n_layers = 35, s.n_heads = 8, s.n_kv_heads = 1, s.ffn_dim = 6144, s.ctx_len = 131072;
      s.sliding_window = 512, s.global_period = 5, s.kv_shared = 20, s.double_wide_ffn = true, s.per_layer_dim = 256;
    } else if (name == "gemma4-e4b") {
      s.dim = 2560, s.n_layers = 42, s.n_heads = 8, s.n_kv_heads = 2, s.ffn_dim = 10240, s.ctx_len = 131072;
      s.sliding_window = 512, s.global_period = 6, s.kv_shared = 18, s.per_layer_dim = 256;
    } else if (name == "gemma4-26b-a4b") {
      s.dim = 2816, s.n_layers = 30, s.n_heads = 16, s.n_kv_heads = 8, s.n_kv_heads_global = 2, s.ffn_dim = 2112;
      s.n_expert = 128, s.n_expert_used = 8, s.expert_ffn_dim = 704, s.moe_period = 1;
      s.ctx_len = 262144, s.sliding_window = 1024, s.global_period = 6, s.k_eq_v = true;
    } else if (name == "gemma4-31b") {
      s.dim = 5376, s.n_layers = 60, s.n_heads = 32, s.n_kv_heads = 16, s.n_kv_heads_global = 4, s.ffn_dim = 21504;
      s.ctx_len = 262144, s.sliding_window = 1024, s.global_period = 6, s.k_eq_v = true;
    } else {
      return std::nullopt;
    }
  } else if (name == "stories260k") {
    s.dim = 64, s.n_layers = 5, s.n_heads = 8, s.n_kv_heads = 4, s.ffn_dim = 172, s.n_vocab = 512;
    s.ctx_len = 512, s.tied_embeddings = true;
  } else if (name == "tiny") {
    s.dim = 256, s.n_layers = 2, s.n_heads = 4, s.n_kv_heads = 2, s.ffn_dim = 512, s.n_vocab = 320;
    s.ctx_len = 512;
  } else {
    return std::nullopt;
  }
  s.name = "synthetic " + name;
  return s;
}

SynthSpec resolved_for_row(const SynthSpec& in, bool tiny_shape) {
  SynthSpec s = in;
  const ArchInfo* row = find_arch_by_name(s.arch);
  if (row && row->arch == Arch::Gemma4 && tiny_shape) {
    // Layers 2 and 5 global; 3, 4, 5 share K/V (3, 4 read local layer 1, 5 global layer 2);
    // experts in layers 1 and 4; layer 2's V is its K; the shared layers' FFN doubled.
    s.dim = 128, s.n_layers = 6, s.n_heads = 4, s.n_kv_heads = 2, s.n_kv_heads_global = 1;
    s.head_dim = 64, s.head_dim_local = 32, s.ffn_dim = 256, s.global_period = 3, s.kv_shared = 3;
    s.double_wide_ffn = true, s.per_layer_dim = 32, s.k_eq_v = true, s.moe_period = 3;
    s.n_expert = 4, s.n_expert_used = 2, s.expert_ffn_dim = 64, s.sliding_window = 8, s.final_softcap = 30.0f;
    s.tied_embeddings = true;
    return s;
  }
  if (row && row->nope_interval > 0 && tiny_shape) s.n_layers = row->nope_interval;  // one NoPE layer, the last
  if (row && row->arch == Arch::GptOss) {
    if (tiny_shape) {  // every feature at distinct sizes: q_dim != dim, windows shorter than a reply
      s.dim = 128, s.n_layers = 4, s.n_heads = 8, s.n_kv_heads = 2, s.head_dim = 32, s.ffn_dim = 128;
      s.n_expert = 8, s.n_expert_used = 4, s.expert_ffn_dim = 96, s.sliding_window = 16;
    }
    if (s.sliding_window < 0) s.sliding_window = 128;
    if (s.rope_scaling == "none") s.rope_scaling = "yarn";  // the model's own (factor 32)
  }
  if (!row || !row->linear_attention) return s;
  if (tiny_shape) {  // every feature, distinct sizes, a few layers
    s.dim = 128, s.n_layers = 4, s.n_heads = 2, s.n_kv_heads = 1, s.head_dim = 64, s.ffn_dim = 256;
    s.ssm_head_dim = 32, s.ssm_k_heads = 2, s.ssm_v_heads = 4, s.ssm_conv_kernel = 4, s.n_nextn = 1;
    if (row->moe.shared_expert)  // k = 3 of 8; routed and shared widths differ (a stride mixup shows)
      s.n_expert = 8, s.n_expert_used = 3, s.expert_ffn_dim = 64, s.shared_expert_ffn_dim = 96;
  }
  if (row->moe.shared_expert) {  // Qwen3.6-35B-A3B's ratios: experts and shared expert dim / 4 wide
    if (s.expert_ffn_dim <= 0) s.expert_ffn_dim = std::max<int64_t>(32, s.dim / 4);
    if (s.shared_expert_ffn_dim <= 0) s.shared_expert_ffn_dim = s.expert_ffn_dim;
  }
  if (s.ssm_head_dim <= 0) s.ssm_head_dim = s.dim >= 1024 ? 128 : 64;
  if (s.ssm_v_heads <= 0) s.ssm_v_heads = std::max<int64_t>(2, (s.dim / 80 + 1) / 2 * 2);
  if (s.ssm_k_heads <= 0) s.ssm_k_heads = std::max<int64_t>(1, s.ssm_v_heads / 2);
  if (s.ssm_conv_kernel <= 0) s.ssm_conv_kernel = 4;
  if (s.full_attention_interval <= 0) s.full_attention_interval = row->default_full_attention_interval;
  return s;
}

void write_synthetic_model(const SynthSpec& spec_in, const std::string& path) {
  SynthSpec spec = resolved_for_row(spec_in);
  using gguf::Value;
  const ArchInfo* row = find_arch_by_name(spec.arch);
  if (!row) throw Error("synth: unknown architecture '" + spec.arch + "' (" + synth_arch_names() + ")");
  const std::string gguf_arch(row->gguf_name);
  if (spec.dim <= 0 || spec.n_layers <= 0 || spec.n_heads <= 0 || spec.n_kv_heads <= 0 ||
      spec.ffn_dim <= 0 || spec.n_vocab <= 0 || spec.ctx_len <= 0)
    throw Error("synth: every size must be positive");
  if (spec.n_heads % spec.n_kv_heads != 0)
    throw Error("synth: heads (" + std::to_string(spec.n_heads) + ") must be a multiple of kv heads (" +
                std::to_string(spec.n_kv_heads) + ")");
  const int64_t head_dim = spec.head_dim > 0 ? spec.head_dim : spec.dim / spec.n_heads;
  if (spec.head_dim <= 0 && spec.dim % spec.n_heads != 0)
    throw Error("synth: dim must be divisible by heads (or give --head-dim)");
  if (head_dim % 2 != 0) throw Error("synth: head dim must be even");
  // The copied vocabulary sets n_vocab before any shape is derived from it.
  std::optional<gguf::GgufFile> vocab_src;
  gguf::GgufWriter hf_vocab;  // the tokenizer.ggml.* keys of a tokenizer.json (vocab_from)
  namespace fs = std::filesystem;
  std::string vocab_from = spec.vocab_from;
  if (!vocab_from.empty() && fs::is_directory(vocab_from)) vocab_from = (fs::path(vocab_from) / "tokenizer.json").string();
  const bool vocab_from_json = vocab_from.size() >= 5 && vocab_from.ends_with(".json");
  if (vocab_from_json) {
    const fs::path cfg = fs::path(vocab_from).parent_path() / "tokenizer_config.json";
    // A gemma4 file's vocabulary is of Gemma 4's kind, as its converter writes it.
    write_hf_tokenizer(vocab_from, fs::is_regular_file(cfg) ? cfg.string() : "", 0, hf_vocab,
                       row->arch == Arch::Gemma4);
    for (const auto& [key, value] : hf_vocab.metadata())
      if (key == "tokenizer.ggml.tokens") spec.n_vocab = static_cast<int64_t>(value.as_array()->items.size());
    // The template tokenizer_config.json carries (Qwen3's, ...), as convert writes it.
    if (fs::is_regular_file(cfg)) {
      std::ifstream in(cfg);
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
        hf_vocab.set("tokenizer.chat_template", gguf::Value::str(j["chat_template"].get<std::string>()));
    }
  } else if (!vocab_from.empty()) {
    vocab_src.emplace(gguf::GgufFile::open(vocab_from));
    const gguf::Array* toks = vocab_src->get_array("tokenizer.ggml.tokens");
    if (!toks) throw Error(spec.vocab_from + ": has no tokenizer.ggml.tokens to copy");
    spec.n_vocab = static_cast<int64_t>(toks->items.size());
  }
  // The config the table's symbolic shapes resolve against.
  ModelConfig c;
  c.arch = row->arch;
  c.arch_name = gguf_arch;
  c.dim = spec.dim, c.n_layers = spec.n_layers, c.n_heads = spec.n_heads, c.n_kv_heads = spec.n_kv_heads;
  c.head_dim = head_dim, c.ffn_dim = spec.ffn_dim, c.n_vocab = spec.n_vocab;
  c.n_rot = spec.n_rot > 0 ? spec.n_rot : row->linear_attention ? head_dim / 4 : head_dim;
  if (c.n_rot % 2 != 0 || c.n_rot > head_dim) throw Error("synth: the rotary dims must be even and <= head dim");
  if (row->linear_attention) {
    c.ssm_head_dim = spec.ssm_head_dim, c.ssm_k_heads = spec.ssm_k_heads, c.ssm_v_heads = spec.ssm_v_heads;
    c.ssm_conv_kernel = spec.ssm_conv_kernel;
    if (c.ssm_v_heads % c.ssm_k_heads != 0)
      throw Error("synth: value heads (" + std::to_string(c.ssm_v_heads) + ") must be a multiple of key heads (" +
                  std::to_string(c.ssm_k_heads) + ")");
    c.recurrent.assign(static_cast<size_t>(spec.n_layers), 0);
    for (int64_t l = 0; l < spec.n_layers; ++l)
      c.recurrent[static_cast<size_t>(l)] = (l + 1) % spec.full_attention_interval != 0;
    if (c.n_attention_layers() == 0)
      throw Error("synth: " + std::to_string(spec.n_layers) + " layers with one full-attention layer in " +
                  std::to_string(spec.full_attention_interval) + " leaves none; give more layers");
  }
  const bool gemma4 = row->arch == Arch::Gemma4;
  if (gemma4) {
    const int64_t hl = spec.head_dim_local > 0 ? spec.head_dim_local : head_dim;
    if (hl % 2 != 0) throw Error("synth: the local head dim must be even");
    if (spec.global_period < 1) throw Error("synth: --global-period must be >= 1");
    const int64_t window = spec.sliding_window >= 0 ? spec.sliding_window : 512;
    if (window <= 0) throw Error("synth: gemma4 needs a sliding window");
    c.sliding_window = window;
    c.head_dim_local = hl;
    c.n_rot_local = hl;
    c.n_kv_shared = spec.kv_shared;
    c.per_layer_dim = spec.per_layer_dim;
    const int64_t kv_global = spec.n_kv_heads_global > 0 ? spec.n_kv_heads_global : spec.n_kv_heads;
    if (spec.n_heads % kv_global != 0) throw Error("synth: heads must be a multiple of the global KV heads");
    for (int64_t l = 0; l < spec.n_layers; ++l) {
      const bool local = (l + 1) % spec.global_period != 0;
      c.local_layers.push_back(local ? 1 : 0);
      c.n_kv_heads_by_layer.push_back(local ? spec.n_kv_heads : kv_global);
      c.ffn_by_layer.push_back(spec.double_wide_ffn && l >= spec.n_layers - spec.kv_shared ? 2 * spec.ffn_dim
                                                                                         : spec.ffn_dim);
      c.moe_layers.push_back(spec.moe_period > 0 && l % spec.moe_period == 1 % spec.moe_period ? 1 : 0);
    }
    c.n_kv_heads = std::max(spec.n_kv_heads, kv_global);
    c.ffn_dim = *std::max_element(c.ffn_by_layer.begin(), c.ffn_by_layer.end());
    if (spec.kv_shared < 0 || spec.kv_shared > spec.n_layers - 2)
      throw Error("synth: --kv-shared must leave at least 2 layers with their own K/V");
    for (int64_t l = c.n_kv_layers_from_start(); l < spec.n_layers; ++l)
      if (c.layer_is_local(c.kv_source(l)) != c.layer_is_local(l))
        throw Error("synth: shared layer " + std::to_string(l) + " would read layer " +
                    std::to_string(c.kv_source(l)) + " of the other kind (the last unshared layer must be global, "
                    "the one before it local)");
    for (int64_t l = 0; l < spec.n_layers; ++l)
      c.v_from_k.push_back(spec.k_eq_v && c.has_own_kv(l) && !c.layer_is_local(l) ? 1 : 0);
    if (spec.moe_period <= 0) c.moe_layers.clear();
    c.fused_gate_up_exps = true;
  }
  if (!row->has(Role::Output)) spec.tied_embeddings = true;  // Gemma: always tied
  if (row->has_experts() && !(gemma4 && spec.moe_period <= 0)) {
    c.n_expert = spec.n_expert;
    c.n_expert_used = spec.n_expert_used;
    c.expert_ffn_dim = spec.expert_ffn_dim > 0 ? spec.expert_ffn_dim : spec.ffn_dim;
    if (row->moe.shared_expert) {
      c.shared_expert_ffn_dim = spec.shared_expert_ffn_dim;
      if (c.shared_expert_ffn_dim <= 0) throw Error("synth: the shared expert's FFN width must be positive");
    }
    if (c.n_expert <= 0 || c.n_expert_used <= 0 || c.n_expert_used > c.n_expert)
      throw Error("synth: need 1 <= --experts-used (" + std::to_string(c.n_expert_used) + ") <= --experts (" +
                  std::to_string(c.n_expert) + ")");
    if (!row->moe.expert_ffn_key && c.expert_ffn_dim != c.ffn_dim)
      throw Error("synth: " + spec.arch + " has no separate expert FFN width (its feed_forward_length is it)");
  }
  if (!spec.tied_embeddings && !row->has(Role::Output))
    throw Error("synth: " + spec.arch + " has no separate output.weight");
  if (spec.tied_embeddings && !row->tied_allowed)
    throw Error("synth: " + spec.arch + " cannot tie its embeddings");
  const int64_t blk = traits(spec.type).block_size;
  for (const TensorSpec& t : row->tensors) {
    if (t.kind != TensorKind::Matrix && t.kind != TensorKind::Experts) continue;
    if (t.per_layer ? !c.layer_has(t, 0) && !c.layer_has(t, spec.n_layers - 1) : !c.layer_has(t, 0)) continue;
    const int64_t cols = resolve_shape(t, c).back();
    if (cols % blk != 0)
      throw Error("synth: matrix width " + std::to_string(cols) + " (" + std::string(t.gguf) +
                  ") is not a multiple of the " + std::string(type_name(spec.type)) + " block size " +
                  std::to_string(blk));
  }

  gguf::GgufWriter w;
  const std::string a = gguf_arch + ".";
  w.set("general.architecture", Value::str(gguf_arch));
  w.set("general.name", Value::str(spec.name));
  w.set(a + "context_length", Value::u32(static_cast<uint32_t>(spec.ctx_len)));
  w.set(a + "embedding_length", Value::u32(static_cast<uint32_t>(spec.dim)));
  w.set(a + "block_count", Value::u32(static_cast<uint32_t>(spec.n_layers + spec.n_nextn)));
  auto u32_array = [](const auto& v) {
    std::vector<int32_t> out;
    for (auto x : v) out.push_back(static_cast<int32_t>(x));
    return Value::i32_array(out);
  };
  // Gemma 4's converter writes arrays where layers differ (double-wide FFN, global KV heads).
  if (gemma4 && spec.double_wide_ffn) w.set(a + "feed_forward_length", u32_array(c.ffn_by_layer));
  else if (!row->moe.shared_expert) w.set(a + "feed_forward_length", Value::u32(static_cast<uint32_t>(spec.ffn_dim)));
  w.set(a + "attention.head_count", Value::u32(static_cast<uint32_t>(spec.n_heads)));
  if (gemma4 && spec.n_kv_heads_global > 0 && spec.n_kv_heads_global != spec.n_kv_heads)
    w.set(a + "attention.head_count_kv", u32_array(c.n_kv_heads_by_layer));
  else w.set(a + "attention.head_count_kv", Value::u32(static_cast<uint32_t>(spec.n_kv_heads)));
  if (gemma4) {
    w.set(a + "attention.key_length_swa", Value::u32(static_cast<uint32_t>(c.head_dim_local)));
    w.set(a + "attention.value_length_swa", Value::u32(static_cast<uint32_t>(c.head_dim_local)));
    w.set(a + "rope.dimension_count_swa", Value::u32(static_cast<uint32_t>(c.n_rot_local)));
    w.set(a + "rope.freq_base_swa", Value::f32(10000.0f));
    std::vector<Value> pattern;
    for (uint8_t x : c.local_layers) pattern.push_back(Value::boolean(x != 0));
    w.set(a + "attention.sliding_window_pattern", Value::array(gguf::ValueType::BOOL, std::move(pattern)));
    w.set(a + "attention.shared_kv_layers", Value::u32(static_cast<uint32_t>(c.n_kv_shared)));
    w.set(a + "embedding_length_per_layer_input", Value::u32(static_cast<uint32_t>(c.per_layer_dim)));
  }
  if (gemma4 || head_dim != spec.dim / spec.n_heads || spec.dim % spec.n_heads != 0) {
    w.set(a + "attention.key_length", Value::u32(static_cast<uint32_t>(head_dim)));
    w.set(a + "attention.value_length", Value::u32(static_cast<uint32_t>(head_dim)));
  }
  const bool gemma = row->hf_norm_shift != 0.0f;
  // Gemma's configs: eps 1e-6; Gemma 3's global layers rope base 1e6 (local 10000 implied).
  w.set(a + "attention.layer_norm_rms_epsilon", Value::f32(gemma || gemma4 ? 1e-6f : 1e-5f));
  w.set(a + "rope.freq_base", Value::f32(spec.rope_scaling == "llama3" ? 500000.0f
                                         : row->arch == Arch::Gemma3 || gemma4 ? 1000000.0f
                                         : row->linear_attention     ? 10000000.0f
                                         : row->arch == Arch::Smollm3 ? 5000000.0f
                                         : row->arch == Arch::GptOss  ? 150000.0f
                                                                      : 10000.0f));
  if (gemma4) {
    w.set(a + "attention.sliding_window", Value::u32(static_cast<uint32_t>(c.sliding_window)));
  } else if (row->sliding_window.pattern == SlidingWindowSpec::Pattern::EveryNthGlobal) {
    const int64_t window = spec.sliding_window >= 0 ? spec.sliding_window
                           : row->sliding_window.default_window > 0 ? row->sliding_window.default_window
                                                                     : 1024;
    if (window > 0) w.set(a + "attention.sliding_window", Value::u32(static_cast<uint32_t>(window)));
    else if (row->sliding_window.window_required)
      throw Error("synth: " + spec.arch + " always has a window (llama.cpp requires the key)");
    else if (row->sliding_window.default_window > 0)
      throw Error("synth: " + spec.arch + " always has a window (llama.cpp's default " +
                  std::to_string(row->sliding_window.default_window) + " applies without the key)");
  }
  if (row->attn_softcap)
    w.set(a + "attn_logit_softcapping",
          Value::f32(spec.attn_softcap >= 0 ? spec.attn_softcap : row->attn_softcap_default));
  if (row->final_softcap) {
    const float fc = spec.final_softcap >= 0 ? spec.final_softcap : row->final_softcap_default;
    if (fc > 0 || row->final_softcap_default > 0) w.set(a + "final_logit_softcapping", Value::f32(fc));
  }
  w.set(a + "rope.dimension_count", Value::u32(static_cast<uint32_t>(c.n_rot)));
  if (row->linear_attention) {
    w.set(a + "ssm.conv_kernel", Value::u32(static_cast<uint32_t>(c.ssm_conv_kernel)));
    w.set(a + "ssm.state_size", Value::u32(static_cast<uint32_t>(c.ssm_head_dim)));
    w.set(a + "ssm.group_count", Value::u32(static_cast<uint32_t>(c.ssm_k_heads)));
    w.set(a + "ssm.time_step_rank", Value::u32(static_cast<uint32_t>(c.ssm_v_heads)));
    w.set(a + "ssm.inner_size", Value::u32(static_cast<uint32_t>(c.ssm_value_dim())));
    w.set(a + "full_attention_interval", Value::u32(static_cast<uint32_t>(spec.full_attention_interval)));
    if (spec.n_nextn > 0) w.set(a + "nextn_predict_layers", Value::u32(static_cast<uint32_t>(spec.n_nextn)));
    // Qwen's multi-section RoPE (text, height, width, unused) in the released models'
    // proportions, 11 : 11 : 10 of the rotated pairs.
    const int64_t pairs = c.n_rot / 2, s0 = (pairs * 11 + 16) / 32, s1 = s0;
    w.set(a + "rope.dimension_sections", Value::i32_array({static_cast<int32_t>(s0), static_cast<int32_t>(s1),
                                                          static_cast<int32_t>(pairs - s0 - s1), 0}));
  }
  w.set(a + "vocab_size", Value::u32(static_cast<uint32_t>(spec.n_vocab)));
  if (row->has_experts() && c.n_expert > 0) {
    w.set(a + "expert_count", Value::u32(static_cast<uint32_t>(c.n_expert)));
    w.set(a + "expert_used_count", Value::u32(static_cast<uint32_t>(c.n_expert_used)));
    if (row->moe.expert_ffn_key)
      w.set(a + "expert_feed_forward_length", Value::u32(static_cast<uint32_t>(c.expert_ffn_dim)));
    if (row->moe.shared_expert)
      w.set(a + "expert_shared_feed_forward_length", Value::u32(static_cast<uint32_t>(c.shared_expert_ffn_dim)));
  }
  if (spec.rope_scaling == "linear") {
    w.set(a + "rope.scaling.type", Value::str("linear"));
    w.set(a + "rope.scaling.factor", Value::f32(row->arch == Arch::Gemma3 ? 8.0f : 4.0f));  // Gemma 3 4B+: 8
  } else if (spec.rope_scaling == "yarn") {
    // gpt-oss: its own 32 (131072 over 4096); otherwise a 4x extension.
    const int64_t factor = row->arch == Arch::GptOss ? 32 : 4;
    w.set(a + "rope.scaling.type", Value::str("yarn"));
    w.set(a + "rope.scaling.factor", Value::f32(static_cast<float>(factor)));
    w.set(a + "rope.scaling.original_context_length",
          Value::u32(static_cast<uint32_t>(std::max<int64_t>(1, spec.ctx_len / factor))));
  } else if (spec.rope_scaling == "longrope") {
    // Phi-3 style: a 4x context extension; the attention factor as llama.cpp's
    // converter computes it, sqrt(1 + ln(scale) / ln(original context)).
    const int64_t orig = spec.ctx_len / 4;
    w.set(a + "rope.scaling.original_context_length", Value::u32(static_cast<uint32_t>(orig)));
    w.set(a + "rope.scaling.attn_factor",
          Value::f32(static_cast<float>(std::sqrt(1.0 + std::log(4.0) / std::log(static_cast<double>(orig))))));
  } else if (spec.rope_scaling != "none" && spec.rope_scaling != "llama3") {
    throw Error("synth: unknown rope scaling '" + spec.rope_scaling + "' (none, linear, yarn, llama3, longrope)");
  }
  const bool wants_longrope = spec.rope_scaling == "longrope";
  if (wants_longrope && (!row->supports(RopeScalingType::LongRope) || spec.ctx_len < 8))
    throw Error("synth: longrope needs an architecture with LongRoPE (phi3) and --ctx >= 8");
  if ((spec.rope_scaling == "linear" && !row->supports(RopeScalingType::Linear)) ||
      (spec.rope_scaling == "yarn" && !row->supports(RopeScalingType::Yarn)) ||
      (spec.rope_scaling == "llama3" && !row->has(Role::RopeFreqs)))
    throw Error("synth: " + spec.arch + " does not take rope scaling '" + spec.rope_scaling + "'");
  if (spec.q4_k_m && spec.type != GgmlType::Q4_K) throw Error("synth: the Q4_K_M mix needs type q4_k");
  if (spec.q4_k_m)
    w.set("general.file_type", Value::u32(static_cast<uint32_t>(LlamaFileType::MostlyQ4_K_M)));
  else if (auto ft = file_type_of(spec.type))
    w.set("general.file_type", Value::u32(static_cast<uint32_t>(*ft)));
  // The Q4_K_M mix's larger type for tensor t of layer i (see SynthSpec::q4_k_m).
  auto matrix_type = [&](const TensorSpec& t, int64_t i) {
    // gpt-oss in MXFP4 as llama.cpp ships it (MOSTLY_MXFP4_MOE): the experts MXFP4, the other
    // matrices Q8_0.
    if (spec.type == GgmlType::MXFP4 && row->arch == Arch::GptOss && t.kind != TensorKind::Experts)
      return GgmlType::Q8_0;
    if (!spec.q4_k_m) return spec.type;
    const int64_t n = spec.n_layers;
    const bool more_bits = i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
    const bool head = t.role == Role::Output || (t.role == Role::TokenEmbd && spec.tied_embeddings);
    // By name, as llama.cpp's quantizer matches "ffn_down" (ffn_down_exps, ffn_down_shexp too).
    const bool bumped = t.role == Role::AttnV || t.role == Role::FfnDown || t.role == Role::FfnDownExps ||
                        t.role == Role::FfnDownShexp;
    return head || (bumped && more_bits) ? GgmlType::Q6_K : spec.type;
  };
  if (!spec.pooling.empty()) {
    static const char* const kPoolings[] = {"none", "mean", "cls", "last", "rank"};
    const auto* it = std::find(std::begin(kPoolings), std::end(kPoolings), spec.pooling);
    if (it == std::end(kPoolings))
      throw Error("synth: unknown pooling '" + spec.pooling + "' (none, mean, cls, last, rank)");
    w.set(a + "pooling_type", Value::u32(static_cast<uint32_t>(it - std::begin(kPoolings))));
    if (spec.pooling == "rank") {
      w.set(a + "classifier.output_labels", Value::str_array({"yes", "no"}));
      w.set("tokenizer.chat_template.rerank", Value::str("query: {query}\ndocument: {document}\nrelevant:"));
    }
  }

  if (vocab_src) {
    for (const auto& [key, value] : vocab_src->metadata())
      if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
  } else if (vocab_from_json) {
    for (const auto& [key, value] : hf_vocab.metadata()) w.set(key, value);
  } else if (spec.n_vocab >= 259 + 3) {
    // A SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens, then
    // filler pieces. Enough for `pagoda generate` to run end to end.
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0.0f, 0.0f, 0.0f};
    std::vector<int32_t> types = {2, 3, 3};
    char buf[16];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      tokens.emplace_back(buf);
      scores.push_back(0.0f);
      types.push_back(6);
    }
    const char* letters = "etaoinshrdlucmfwypvbgkjqxz";
    for (int64_t i = static_cast<int64_t>(tokens.size()); i < spec.n_vocab; ++i) {
      int64_t k = i - 259;
      std::string piece = "\xE2\x96\x81";  // '▁'
      do {
        piece += letters[k % 26];
        k /= 26;
      } while (k > 0);
      tokens.push_back(piece);
      scores.push_back(-static_cast<float>(i));
      types.push_back(1);
    }
    w.set("tokenizer.ggml.model", Value::str("llama"));
    w.set("tokenizer.ggml.tokens", Value::str_array(tokens));
    w.set("tokenizer.ggml.scores", Value::f32_array(scores));
    w.set("tokenizer.ggml.token_type", Value::i32_array(types));
    w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
    w.set("tokenizer.ggml.eos_token_id", Value::u32(2));
    w.set("tokenizer.ggml.unknown_token_id", Value::u32(0));
    w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  }

  Rng rng(spec.seed);
  std::vector<float> buf;
  // One tensor of the row, drawn in table order (the order fixes which random
  // numbers each tensor gets, so a seed gives the same weights as long as the
  // row's order stays).
  auto emit = [&](const TensorSpec& t, int64_t layer) {
    const std::string name = gguf_tensor_name(t, layer);
    const std::vector<int64_t> shape = resolve_shape(t, c, layer);
    const std::vector<int64_t> dims(shape.rbegin(), shape.rend());  // ggml order
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    buf.resize(static_cast<size_t>(n));
    GgmlType type = GgmlType::F32;
    switch (t.kind) {
      case TensorKind::Matrix:
      case TensorKind::Experts:
        // Embeddings std 1 (a row is the residual stream's start; Gemma's 1/sqrt(dim), which
        // its sqrt(dim) embedding scale brings back to 1, and which keeps its tied logits
        // O(1) as in the real models); projections 1/sqrt(fan_in).
        // Gemma 4's per-layer embeddings likewise: 1/sqrt(per_layer_dim), which the forward's
        // sqrt(per_layer_dim) brings back to 1.
        fill(rng, buf,
             t.role == Role::TokenEmbd ? (row->embed_scale ? 1.0f / std::sqrt(static_cast<float>(spec.dim)) : 1.0f)
             : t.role == Role::PerLayerTokenEmbd ? 1.0f / std::sqrt(static_cast<float>(c.per_layer_dim))
                                                 : 1.0f / std::sqrt(static_cast<float>(shape.back())));
        type = matrix_type(t, layer);
        break;
      case TensorKind::Router:
        // Std 2/sqrt(dim): router logits of std ~2, a softmax as peaked as trained
        // routers' (1/sqrt(dim) makes experts near-equally likely, the top-k choice
        // a near-tie at many tokens; std 1 makes the top expert take all the weight).
        // Gemma 4's router reads rms(h) / sqrt(dim) (a vector of norm 1, not of RMS 1):
        // std 2 gives it the same logit spread.
        fill(rng, buf, gemma4 && t.role == Role::FfnRouter ? 2.0f : 2.0f / std::sqrt(static_cast<float>(shape.back())));
        break;
      case TensorKind::Norm:
        buf = norm_weights(rng, n);
        // Gemma 4 scores q . k unscaled, q and k RMS-normed per head: q/k norm weights of
        // d^-1/4 give scores of std ~1, as 1/sqrt(d) does elsewhere (weights of 1 make
        // every softmax near one-hot, and the test models needlessly ill-conditioned).
        if (gemma4 && (t.role == Role::AttnQNorm || t.role == Role::AttnKNorm))
          for (float& x : buf) x /= std::sqrt(std::sqrt(static_cast<float>(n)));
        break;
      case TensorKind::Decay:  // -exp(A_log) with A_log in [0, ln 16]: decay rates of trained models
        for (float& x : buf) x = -std::exp(std::log(16.0f) * 0.5f * (rng.uniform() + 1.0f));
        break;
      case TensorKind::Bias:
      case TensorKind::ExpertBias: fill(rng, buf, 0.1f); break;
      case TensorKind::Sinks: fill(rng, buf, 1.0f); break;
      case TensorKind::RopeFactors:
        if (t.role == Role::RopeFreqs && gemma4) {
          // HF's "proportional" RoPE as llama.cpp's converter writes it: the first
          // global_rotary of the pairs turn (factor 1), the rest are held still (1e30).
          const int64_t turning = static_cast<int64_t>(static_cast<float>(n) * spec.global_rotary);
          for (int64_t i = 0; i < n; ++i) buf[i] = i < turning ? 1.0f : 1e30f;
        } else if (t.role == Role::RopeFreqs) {
          // Llama 3.1 frequency factors (factor 8, low 1, high 4, original context 8192),
          // computed as the reference converter writes rope_freqs.weight.
          llama3_freq_factors(buf.data(), head_dim, 500000.0f, 8.0f, 1.0f, 4.0f, 8192);
        } else {
          // LongRoPE factors shaped like Phi-3.5's: short ones near 1, long ones rising
          // to the extension factor (4) on the slow pairs. Deterministic, no RNG draw.
          for (int64_t i = 0; i < n; ++i) {
            const double x = n > 1 ? static_cast<double>(i) / static_cast<double>(n - 1) : 0.0;
            buf[i] = static_cast<float>(t.role == Role::RopeFactorsLong ? 1.0 + 3.0 * x * x : 1.0 + 0.25 * x);
          }
        }
        break;
    }
    w.add_tensor_f32(name, type, dims, buf.data());
  };
  auto wanted = [&](const TensorSpec& t) {
    switch (t.presence) {
      case Presence::Required: return true;
      case Presence::Untied: return !spec.tied_embeddings;
      case Presence::Optional:
        return (gemma4 && (t.role == Role::LayerOutScale || t.role == Role::FfnDownExpsScale)) ||
               (t.role == Role::RopeFreqs && spec.rope_scaling == "llama3") ||
               ((t.role == Role::RopeFactorsLong || t.role == Role::RopeFactorsShort) && wants_longrope);
    }
    return false;
  };
  for (const TensorSpec& t : row->tensors)
    if (!t.per_layer && wanted(t) && c.layer_has(t, 0)) emit(t, 0);
  for (int64_t i = 0; i < spec.n_layers; ++i)
    for (const TensorSpec& t : row->tensors)
      if (t.per_layer && wanted(t) && c.layer_has(t, i)) emit(t, i);
  // Multi-token-prediction blocks (linear-attention rows): a full-attention block after
  // the trunk with its nextn.* tensors, as llama.cpp writes them; readers skip them.
  for (int64_t i = spec.n_layers; i < spec.n_layers + spec.n_nextn; ++i) {
    for (const TensorSpec& t : row->tensors)
      if (t.per_layer && wanted(t) && t.layers != LayerKind::Recurrent) emit(t, i);
    const std::string b = "blk." + std::to_string(i) + ".nextn.";
    buf.resize(static_cast<size_t>(2 * spec.dim * spec.dim));
    fill(rng, buf, 1.0f / std::sqrt(static_cast<float>(2 * spec.dim)));
    w.add_tensor_f32(b + "eh_proj.weight", GgmlType::F32, {2 * spec.dim, spec.dim}, buf.data());
    for (const char* norm : {"enorm.weight", "hnorm.weight", "shared_head_norm.weight"}) {
      buf = norm_weights(rng, spec.dim);
      w.add_tensor_f32(b + norm, GgmlType::F32, {spec.dim}, buf.data());
    }
  }
  if (spec.pooling == "rank") {  // the reranker head, last: the other tensors keep their draws
    buf.resize(static_cast<size_t>(2 * spec.dim));
    fill(rng, buf, 1.0f / std::sqrt(static_cast<float>(spec.dim)));
    w.add_tensor_f32("cls.output.weight", GgmlType::F32, {spec.dim, 2}, buf.data());
  }
  w.write(path);
}

}  // namespace pagoda
