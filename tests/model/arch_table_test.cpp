// The architecture table: lookups by GGUF and HF names, tensor names and
// shapes, and that `synth` writes exactly the tensors a row lists.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "gguf/gguf.h"
#include "model/arch_table.h"
#include "model/config.h"
#include "tools/synth.h"

namespace pagoda {
namespace {

TEST(ArchTable, GgufNamesAndAliasesFindTheirRow) {
  for (const ArchInfo& r : arch_table()) {
    ASSERT_EQ(find_arch_by_gguf(r.gguf_name, r.has_experts()), &r) << r.name();
    EXPECT_EQ(find_arch_by_name(r.name()), &r);
    EXPECT_EQ(&arch_info(r.arch), &r);
    for (std::string_view a : r.gguf_aliases) EXPECT_EQ(find_arch_by_gguf(a, r.has_experts()), &r) << a;
  }
  EXPECT_EQ(find_arch_by_gguf("mistral")->arch, Arch::Llama);
  // A llama file with llama.expert_count is Mixtral; qwen3moe has only its MoE row.
  EXPECT_EQ(find_arch_by_gguf("llama", true)->arch, Arch::Mixtral);
  EXPECT_EQ(find_arch_by_gguf("llama", false)->arch, Arch::Llama);
  EXPECT_EQ(find_arch_by_gguf("qwen3moe", false)->arch, Arch::Qwen3Moe);
  EXPECT_EQ(supported_gguf_arch_names().find("llama"), supported_gguf_arch_names().rfind("llama"));
  EXPECT_EQ(find_arch_by_gguf("mamba"), nullptr);
  EXPECT_NE(supported_gguf_arch_names().find("mistral"), std::string::npos);
}

TEST(ArchTable, HfModelTypeOrArchitecturesFindTheRow) {
  EXPECT_EQ(find_arch_by_hf("mistral", "")->arch, Arch::Llama);
  EXPECT_EQ(find_arch_by_hf("qwen2", "")->arch, Arch::Qwen2);
  // An unknown model_type falls back to architectures[0].
  EXPECT_EQ(find_arch_by_hf("my-finetune", "Qwen3ForCausalLM")->arch, Arch::Qwen3);
  EXPECT_EQ(find_arch_by_hf("mamba", "MambaForCausalLM"), nullptr);
  for (const ArchInfo& r : arch_table())
    for (std::string_view t : r.hf_model_types) EXPECT_EQ(find_arch_by_hf(t, ""), &r) << t;
}

TEST(ArchTable, EveryRowNamesEachTensorOnceAndHasTheCoreRoles) {
  for (const ArchInfo& r : arch_table()) {
    SCOPED_TRACE(std::string(r.name()));
    std::set<std::string> gguf, hf;
    std::set<Role> roles;
    for (const TensorSpec& t : r.tensors) {
      EXPECT_TRUE(roles.insert(t.role).second);
      EXPECT_TRUE(gguf.insert(gguf_tensor_name(t, 3)).second) << t.gguf;
      if (!t.hf.empty()) {
        EXPECT_TRUE(hf.insert(hf_tensor_name(t, 3)).second) << t.hf;
      }
      // Routers are 2-D but for the shared expert's gate: one logit per token.
      const size_t rank = t.kind == TensorKind::Experts                                   ? 3u
                          : t.role == Role::FfnGateInpShexp                               ? 1u
                          : t.kind == TensorKind::Matrix || t.kind == TensorKind::Router ||
                                    t.kind == TensorKind::ExpertBias
                              ? 2u
                                                                                          : 1u;
      EXPECT_EQ(t.shape.size(), rank) << t.gguf;
      // Per-expert HF names carry the expert index; others none (rows read only from
      // GGUF, qwen35 / qwen35moe, have no HF names at all).
      if (!t.hf.empty()) {
        EXPECT_EQ(t.hf.find('*') != std::string_view::npos, t.kind == TensorKind::Experts) << t.hf;
      }
      if (t.permute != Permute::None) {
        EXPECT_TRUE(r.permute_qk);
      }
    }
    for (Role role : {Role::TokenEmbd, Role::OutputNorm, Role::AttnNorm, Role::AttnOut, Role::FfnNorm})
      EXPECT_TRUE(r.has(role));
    // A dense FFN or a routed one, never both (but Gemma 4, whose MoE layers keep a dense
    // FFN beside the experts).
    EXPECT_EQ(r.has(Role::FfnDown), !r.has_experts() || r.arch == Arch::Gemma4);
    for (Role role : {Role::FfnRouter, Role::FfnGateExps, Role::FfnUpExps, Role::FfnDownExps})
      EXPECT_EQ(r.has(role), r.has_experts());
    for (Role role : {Role::FfnGateInpShexp, Role::FfnGateShexp, Role::FfnUpShexp, Role::FfnDownShexp})
      EXPECT_EQ(r.has(role), r.moe.shared_expert);
    EXPECT_TRUE(!r.moe.shared_expert || r.has_experts());
    EXPECT_TRUE(r.supports(RopeScalingType::None));
  }
}

TEST(ArchTable, NamesAndShapesResolveAgainstAConfig) {
  const ArchInfo& q = arch_info(Arch::Qwen3);
  EXPECT_EQ(q.gguf_tensor(Role::AttnKNorm, 7), "blk.7.attn_k_norm.weight");
  EXPECT_EQ(q.hf_tensor(Role::AttnKNorm, 7), "model.layers.7.self_attn.k_norm.weight");
  EXPECT_EQ(q.gguf_tensor(Role::Output), "output.weight");
  EXPECT_EQ(q.hf_tensor(Role::Output), "lm_head.weight");
  EXPECT_FALSE(q.has(Role::AttnQBias));
  ModelConfig c;
  c.arch = Arch::Qwen3;
  c.dim = 64, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32, c.ffn_dim = 96, c.n_vocab = 300, c.n_rot = 32;
  EXPECT_EQ(resolve_shape(*q.find(Role::AttnQ), c), (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(resolve_shape(*q.find(Role::AttnK), c), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(resolve_shape(*q.find(Role::AttnOut), c), (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(resolve_shape(*q.find(Role::AttnQNorm), c), (std::vector<int64_t>{32}));
  EXPECT_EQ(resolve_shape(*q.find(Role::FfnDown), c), (std::vector<int64_t>{64, 96}));
  EXPECT_EQ(resolve_shape(*q.find(Role::RopeFreqs), c), (std::vector<int64_t>{16}));
  // Only llama permutes Q/K on conversion; only qwen2 has biases.
  EXPECT_TRUE(arch_info(Arch::Llama).permute_qk);
  EXPECT_FALSE(arch_info(Arch::Qwen2).permute_qk);
  EXPECT_TRUE(arch_info(Arch::Qwen2).qkv_bias);
}

TEST(ArchTable, ExpertTensorsStackExpertsFirstAndNameEachExpertInHf) {
  const ArchInfo& q = arch_info(Arch::Qwen3Moe);
  const ArchInfo& m = arch_info(Arch::Mixtral);
  EXPECT_EQ(q.gguf_tensor(Role::FfnGateExps, 5), "blk.5.ffn_gate_exps.weight");
  EXPECT_EQ(q.gguf_tensor(Role::FfnRouter, 5), "blk.5.ffn_gate_inp.weight");
  EXPECT_EQ(hf_tensor_name(*q.find(Role::FfnDownExps), 5, 17), "model.layers.5.mlp.experts.17.down_proj.weight");
  EXPECT_EQ(q.hf_tensor(Role::FfnRouter, 5), "model.layers.5.mlp.gate.weight");
  // Mixtral: w1 gate, w3 up, w2 down; GGUF names as qwen3moe's, architecture llama.
  EXPECT_EQ(m.gguf_name, "llama");
  EXPECT_EQ(m.gguf_tensor(Role::FfnUpExps, 0), "blk.0.ffn_up_exps.weight");
  EXPECT_EQ(hf_tensor_name(*m.find(Role::FfnGateExps), 1, 3), "model.layers.1.block_sparse_moe.experts.3.w1.weight");
  EXPECT_EQ(hf_tensor_name(*m.find(Role::FfnUpExps), 1, 3), "model.layers.1.block_sparse_moe.experts.3.w3.weight");
  EXPECT_EQ(hf_tensor_name(*m.find(Role::FfnDownExps), 1, 3), "model.layers.1.block_sparse_moe.experts.3.w2.weight");
  ModelConfig c;
  c.arch = Arch::Qwen3Moe;
  c.dim = 64, c.n_expert = 8, c.expert_ffn_dim = 32;
  // Row-major [n_expert, rows, cols]: GGUF (ggml) dims [cols, rows, n_expert].
  EXPECT_EQ(resolve_shape(*q.find(Role::FfnGateExps), c), (std::vector<int64_t>{8, 32, 64}));
  EXPECT_EQ(resolve_shape(*q.find(Role::FfnDownExps), c), (std::vector<int64_t>{8, 64, 32}));
  EXPECT_EQ(resolve_shape(*q.find(Role::FfnRouter), c), (std::vector<int64_t>{8, 64}));
}

// qwen35moe: qwen35's trunk (the same attention and Gated DeltaNet tensors, in the same
// layers) with llama.cpp's qwen35moe FFN: routed experts, renormalised top k, and a shared
// expert whose gate ffn_gate_inp_shexp is one [dim] vector.
TEST(ArchTable, Qwen35MoeIsQwen35sTrunkWithRoutedAndSharedExperts) {
  const ArchInfo& dense = arch_info(Arch::Qwen35);
  const ArchInfo& moe = arch_info(Arch::Qwen35Moe);
  EXPECT_EQ(moe.gguf_name, "qwen35moe");
  EXPECT_EQ(find_arch_by_gguf("qwen35moe", true), &moe);
  EXPECT_EQ(moe.moe.router, RouterKind::SoftmaxTopKRenormalized);
  EXPECT_TRUE(moe.moe.expert_ffn_key);
  EXPECT_TRUE(moe.linear_attention && moe.gated_attention && moe.qk_norm);
  EXPECT_EQ(moe.default_full_attention_interval, dense.default_full_attention_interval);
  for (const TensorSpec& t : dense.tensors) {
    if (t.role == Role::FfnGate || t.role == Role::FfnUp || t.role == Role::FfnDown) {
      EXPECT_FALSE(moe.has(t.role));
      continue;
    }
    const TensorSpec* m = moe.find(t.role);
    ASSERT_NE(m, nullptr) << t.gguf;
    EXPECT_EQ(m->gguf, t.gguf);
    EXPECT_EQ(m->shape, t.shape) << t.gguf;
    EXPECT_EQ(m->layers, t.layers) << t.gguf;
  }
  EXPECT_EQ(moe.gguf_tensor(Role::FfnGateInpShexp, 2), "blk.2.ffn_gate_inp_shexp.weight");
  EXPECT_EQ(moe.gguf_tensor(Role::FfnGateShexp, 2), "blk.2.ffn_gate_shexp.weight");
  EXPECT_EQ(moe.gguf_tensor(Role::FfnUpShexp, 2), "blk.2.ffn_up_shexp.weight");
  EXPECT_EQ(moe.gguf_tensor(Role::FfnDownShexp, 2), "blk.2.ffn_down_shexp.weight");
  ModelConfig c;
  c.arch = Arch::Qwen35Moe;
  c.dim = 64, c.n_expert = 8, c.expert_ffn_dim = 32, c.shared_expert_ffn_dim = 48;
  EXPECT_EQ(resolve_shape(*moe.find(Role::FfnGateInpShexp), c), (std::vector<int64_t>{64}));
  EXPECT_EQ(resolve_shape(*moe.find(Role::FfnUpShexp), c), (std::vector<int64_t>{48, 64}));
  EXPECT_EQ(resolve_shape(*moe.find(Role::FfnDownShexp), c), (std::vector<int64_t>{64, 48}));
  EXPECT_EQ(resolve_shape(*moe.find(Role::FfnUpExps), c), (std::vector<int64_t>{8, 32, 64}));
}

// synth's qwen35moe shapes: the released Qwen3.6-35B-A3B config; tiny with every feature
// (distinct routed / shared widths, k = 3 of 8, the hybrid trunk, an MTP block); --dim D
// with experts and shared expert D / 4 wide. Files get no feed_forward_length.
TEST(ArchTable, SynthQwen35MoeShapes) {
  const SynthSpec a3b = *synth_shape("qwen3.6-35b-a3b");
  EXPECT_EQ(a3b.arch, "qwen35moe");
  EXPECT_EQ(std::vector<int64_t>({a3b.dim, a3b.n_layers, a3b.n_heads, a3b.n_kv_heads, a3b.head_dim}),
            std::vector<int64_t>({2048, 40, 16, 2, 256}));
  EXPECT_EQ(std::vector<int64_t>({a3b.ssm_head_dim, a3b.ssm_k_heads, a3b.ssm_v_heads, a3b.ssm_conv_kernel, a3b.n_nextn}),
            std::vector<int64_t>({128, 16, 32, 4, 1}));
  EXPECT_EQ(std::vector<int64_t>({a3b.n_expert, a3b.n_expert_used, a3b.expert_ffn_dim, a3b.shared_expert_ffn_dim}),
            std::vector<int64_t>({256, 8, 512, 512}));
  EXPECT_EQ(a3b.n_vocab, 248320);
  EXPECT_FALSE(a3b.tied_embeddings);

  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pagoda_arch_q35moe_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto written = [&](const SynthSpec& s) {
    const std::string path = (dir / "m.gguf").string();
    write_synthetic_model(s, path);
    const gguf::GgufFile f = gguf::GgufFile::open(path);
    EXPECT_FALSE(f.has("qwen35moe.feed_forward_length"));
    return ModelConfig::from_gguf(f);
  };
  SynthSpec tiny;
  tiny.arch = "qwen35moe";
  tiny = resolved_for_row(tiny, /*tiny_shape=*/true);
  const ModelConfig t = written(tiny);
  EXPECT_EQ(std::vector<int64_t>({t.n_expert, t.n_expert_used, t.expert_ffn_dim, t.shared_expert_ffn_dim}),
            std::vector<int64_t>({8, 3, 64, 96}));
  EXPECT_EQ(std::vector<int64_t>({t.n_layers, t.n_recurrent_layers(), t.n_nextn_layers, t.ssm_k_heads, t.ssm_v_heads}),
            std::vector<int64_t>({4, 3, 1, 2, 4}));
  SynthSpec d;  // --dim 512 --layers 8
  d.arch = "qwen35moe";
  d.dim = 512, d.n_layers = 8, d.n_vocab = 300;
  const ModelConfig c = written(d);
  EXPECT_EQ(std::vector<int64_t>({c.n_expert, c.n_expert_used, c.expert_ffn_dim, c.shared_expert_ffn_dim}),
            std::vector<int64_t>({8, 2, 128, 128}));
  EXPECT_EQ(std::vector<int64_t>({c.n_attention_layers(), c.ssm_head_dim, c.ssm_v_heads, c.ssm_k_heads}),
            std::vector<int64_t>({2, 64, 6, 3}));
  fs::remove_all(dir);
}

// synth reads the table: its file holds exactly the row's required tensors
// (plus output.weight untied), under the row's GGUF names, with the resolved
// shapes reversed into ggml order, and a config that loads back to the row.
TEST(ArchTable, SynthWritesExactlyTheRowsTensors) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pagoda_arch_table_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const ArchInfo& r : arch_table()) {
    SCOPED_TRACE(std::string(r.name()));
    SynthSpec s = *synth_shape("tiny");
    s.arch = std::string(r.name());
    s.dim = 64, s.ffn_dim = 96, s.n_vocab = 300, s.n_layers = 2;
    if (r.linear_attention) s.n_layers = 4, s.n_nextn = 1;  // 3 recurrent, 1 full, 1 MTP block (not listed)
    s.n_expert = 4, s.n_expert_used = 2, s.expert_ffn_dim = r.moe.expert_ffn_key ? 32 : 0;
    if (r.arch == Arch::Gemma4) s = resolved_for_row(s, /*tiny_shape=*/true);  // every Gemma 4 feature
    const std::string path = (dir / (s.arch + ".gguf")).string();
    write_synthetic_model(s, path);
    const gguf::GgufFile f = gguf::GgufFile::open(path);
    const ModelConfig c = ModelConfig::from_gguf(f);
    EXPECT_EQ(c.arch, r.arch);
    if (r.has_experts()) {
      EXPECT_EQ(c.n_expert, 4);
      EXPECT_EQ(c.n_expert_used, 2);
      EXPECT_EQ(c.expert_ffn_dim, r.moe.expert_ffn_key ? (r.arch == Arch::Gemma4 ? 64 : 32) : 96);
      const int64_t moe_layer = r.arch == Arch::Gemma4 ? 1 : 0;  // Gemma 4's tiny: experts in layers 1 and 4
      EXPECT_EQ(f.find_tensor(r.gguf_tensor(Role::FfnRouter, moe_layer))->type, GgmlType::F32);
    }
    std::set<std::string> want;
    for (const TensorSpec& t : r.tensors) {
      // Optional tensors synth writes: Gemma 4's layer output scales and expert scales (the
      // converter writes both for the released models).
      const bool written = r.arch == Arch::Gemma4 && (t.role == Role::LayerOutScale || t.role == Role::FfnDownExpsScale);
      if (t.presence == Presence::Optional && !written) continue;
      if (t.presence == Presence::Untied && s.tied_embeddings) continue;
      for (int64_t i = 0; i < (t.per_layer ? c.n_layers : 1); ++i) {
        if (!c.layer_has(t, i)) continue;  // hybrids: attention / recurrent layers only; Gemma 4's kinds
        const std::string name = gguf_tensor_name(t, i);
        want.insert(name);
        const gguf::TensorInfo* ti = f.find_tensor(name);
        ASSERT_NE(ti, nullptr) << name;
        const std::vector<int64_t> shape = resolve_shape(t, c, i);
        EXPECT_EQ(ti->dims, std::vector<int64_t>(shape.rbegin(), shape.rend())) << name;
      }
    }
    std::set<std::string> got;
    for (const gguf::TensorInfo& t : f.tensors())
      if (t.name.rfind("blk." + std::to_string(c.n_layers) + ".", 0) != 0) got.insert(t.name);  // not the MTP block
    EXPECT_EQ(got, want);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagoda
