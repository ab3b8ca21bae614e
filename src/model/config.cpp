#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "common/error.h"

namespace pagoda {

const char* arch_name(Arch arch) { return arch_info(arch).gguf_name.data(); }

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Unspecified: return "unspecified";
    case Pooling::None: return "none";
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Last: return "last";
    case Pooling::Rank: return "rank";
  }
  return "?";
}

float ModelConfig::attention_scale() const {
  return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

float ModelConfig::gguf_attention_scale() const {
  const ArchInfo& row = info();
  if (row.attn_scale_dim_over_heads_layers > 0 && n_layers == row.attn_scale_dim_over_heads_layers)
    return 1.0f / std::sqrt(static_cast<float>(dim / n_heads));
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

std::vector<int64_t> ModelConfig::layer_windows() const {
  std::vector<int64_t> w;
  for (int64_t l = 0; l < n_layers; ++l)
    if (has_own_kv(l)) w.push_back(layer_window(l));
  return w;
}

std::vector<KvLayerShape> ModelConfig::kv_layer_shapes() const {
  std::vector<KvLayerShape> v;
  for (int64_t l = 0; l < n_layers; ++l)
    if (has_own_kv(l)) v.push_back({layer_window(l), {kv_heads_of(l), head_dim_of(l)}});
  return v;
}

int64_t ModelConfig::n_attention_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layers; ++l) n += is_recurrent(l) ? 0 : 1;
  return n;
}

int64_t ModelConfig::n_kv_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layers; ++l) n += has_own_kv(l) ? 1 : 0;
  return n;
}

int64_t ModelConfig::kv_layer(int64_t layer) const {
  if (is_recurrent(layer)) return -1;
  const int64_t source = kv_source(layer);
  int64_t n = 0;
  for (int64_t l = 0; l < source; ++l) n += has_own_kv(l) ? 1 : 0;
  return n;
}

int64_t ModelConfig::recurrent_slot(int64_t layer) const {
  if (!is_recurrent(layer)) return -1;
  int64_t n = 0;
  for (int64_t l = 0; l < layer; ++l) n += is_recurrent(l) ? 1 : 0;
  return n;
}

bool ModelConfig::layer_has(const TensorSpec& t, int64_t layer) const {
  switch (t.layers) {
    case LayerKind::All: return true;
    case LayerKind::Attention: return !is_recurrent(layer);
    case LayerKind::Recurrent: return is_recurrent(layer);
    case LayerKind::OwnKv: return has_own_kv(layer);
    case LayerKind::OwnV: return has_own_kv(layer) && !layer_v_from_k(layer);
    case LayerKind::Moe: return is_moe_layer(layer);
    case LayerKind::PerLayerInput: return per_layer_dim > 0;
  }
  return true;
}

bool ModelConfig::layer_is_local(int64_t layer) const {
  if (sliding_window <= 0) return false;
  const SlidingWindowSpec& sw = info().sliding_window;
  switch (sw.pattern) {
    case SlidingWindowSpec::Pattern::None:
    case SlidingWindowSpec::Pattern::Ignored: return false;
    case SlidingWindowSpec::Pattern::AllLayers: return true;
    case SlidingWindowSpec::Pattern::EveryNthGlobal: {
      // llama.cpp's set_swa_pattern(n): local when il % n < n - 1, i.e. (il + 1) % n != 0;
      // n == 0 makes every layer local.
      const int64_t period = swa_period >= 0 ? swa_period : sw.period;
      return period == 0 || (layer + 1) % period != 0;
    }
    case SlidingWindowSpec::Pattern::PerLayerArray:
      return !local_layers.empty() && local_layers[static_cast<size_t>(layer)] != 0;
  }
  return false;
}

namespace {

int64_t require_positive(const gguf::GgufFile& f, const std::string& key) {
  auto v = f.get_int(key);
  if (!v) throw Error(f.path() + ": missing metadata key '" + key + "'");
  if (*v <= 0 || *v > (int64_t{1} << 32))
    throw Error(f.path() + ": metadata key '" + key + "' has invalid value " + std::to_string(*v));
  return *v;
}

int64_t optional_positive(const gguf::GgufFile& f, const std::string& key, int64_t fallback) {
  auto v = f.get_int(key);
  if (!v) return fallback;
  if (*v <= 0 || *v > (int64_t{1} << 32))
    throw Error(f.path() + ": metadata key '" + key + "' has invalid value " + std::to_string(*v));
  return *v;
}

// Gated DeltaNet sizes and the layer layout (ArchInfo::linear_attention), checked so that
// every tensor shape derived from them is consistent: a file whose sizes disagree fails
// here, naming the keys, not later on a tensor's shape.
void read_linear_attention(const gguf::GgufFile& f, const std::string& p, const ArchInfo& row, ModelConfig& c) {
  c.n_nextn_layers = f.get_int(p + "nextn_predict_layers").value_or(0);
  if (c.n_nextn_layers < 0 || c.n_nextn_layers >= c.n_layers)
    throw Error(f.path() + ": " + p + "nextn_predict_layers " + std::to_string(c.n_nextn_layers) +
                " must be in [0, block_count " + std::to_string(c.n_layers) + ")");
  const int64_t n_all = c.n_layers;
  c.n_layers -= c.n_nextn_layers;  // the multi-token-prediction blocks never run here
  c.ssm_conv_kernel = require_positive(f, p + "ssm.conv_kernel");
  c.ssm_head_dim = require_positive(f, p + "ssm.state_size");
  c.ssm_k_heads = require_positive(f, p + "ssm.group_count");
  c.ssm_v_heads = require_positive(f, p + "ssm.time_step_rank");
  const int64_t inner = require_positive(f, p + "ssm.inner_size");
  if (c.ssm_conv_kernel < 2 || c.ssm_conv_kernel > 64)
    throw Error(f.path() + ": " + p + "ssm.conv_kernel " + std::to_string(c.ssm_conv_kernel) + " must be in [2, 64]");
  if (inner != c.ssm_v_heads * c.ssm_head_dim)
    throw Error(f.path() + ": " + p + "ssm.inner_size " + std::to_string(inner) + " is not ssm.time_step_rank (" +
                std::to_string(c.ssm_v_heads) + ") x ssm.state_size (" + std::to_string(c.ssm_head_dim) + ")");
  if (c.ssm_v_heads % c.ssm_k_heads != 0)
    throw Error(f.path() + ": " + p + "ssm.time_step_rank " + std::to_string(c.ssm_v_heads) +
                " is not a multiple of ssm.group_count " + std::to_string(c.ssm_k_heads));
  if (c.ssm_head_dim > 1024 || c.ssm_v_heads > 1024)
    throw Error(f.path() + ": " + p + "ssm.state_size / time_step_rank too large (at most 1024 each)");
  c.recurrent.assign(static_cast<size_t>(c.n_layers), 0);
  if (const gguf::Array* a = f.get_array(p + "attention.recurrent_layers")) {
    if (static_cast<int64_t>(a->items.size()) != n_all)
      throw Error(f.path() + ": " + p + "attention.recurrent_layers has " + std::to_string(a->items.size()) +
                  " entries for block_count " + std::to_string(n_all));
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const gguf::Value& v = a->items[static_cast<size_t>(l)];
      std::optional<int64_t> flag = v.as_int();
      if (!flag)
        if (auto b = v.as_bool()) flag = *b ? 1 : 0;
      if (!flag) throw Error(f.path() + ": " + p + "attention.recurrent_layers holds a non-integer, non-boolean entry");
      c.recurrent[static_cast<size_t>(l)] = *flag != 0;
    }
  } else {
    const int64_t interval = optional_positive(f, p + "full_attention_interval", row.default_full_attention_interval);
    for (int64_t l = 0; l < c.n_layers; ++l) c.recurrent[static_cast<size_t>(l)] = (l + 1) % interval != 0;
  }
  if (c.n_attention_layers() == 0)
    throw Error(f.path() + ": " + p + (f.has(p + "attention.recurrent_layers") ? "attention.recurrent_layers" :
                                       "full_attention_interval") +
                " makes every layer linear attention; at least one full-attention layer is needed");
  // No linear layer at all (full_attention_interval 1, or recurrent_layers all 0, which
  // llama.cpp reads): an attention-only model with qwen35's gated attention, no recurrent
  // state (else a store would be asked for zero state slots).
  if (c.n_recurrent_layers() == 0) c.recurrent.clear();
  if (const gguf::Array* s = f.get_array(p + "rope.dimension_sections")) {
    int64_t sum = 0;
    for (const auto& v : s->items) {
      c.rope_sections.push_back(v.as_int().value_or(-1));
      sum += c.rope_sections.back();
      if (c.rope_sections.back() < 0) throw Error(f.path() + ": " + p + "rope.dimension_sections has a negative entry");
    }
    if (sum * 2 > c.n_rot)
      throw Error(f.path() + ": " + p + "rope.dimension_sections sum to " + std::to_string(sum) +
                  " pairs, more than rope.dimension_count / 2 (" + std::to_string(c.n_rot / 2) + ")");
  }
}

// {arch}.attention.sliding_window_pattern of rows that read it (SlidingWindowSpec::
// period_key): a number is the period. llama.cpp's openai-moe loader reads only a number and
// ignores an array, running its default period; an array that marks any layer otherwise than
// that period would run differently here and there, so it is refused, naming the layer.
void read_window_pattern(const gguf::GgufFile& f, const std::string& p, const ArchInfo& row, ModelConfig& c) {
  const std::string key = p + "attention.sliding_window_pattern";
  const gguf::Value* value = f.find(key);
  if (!value) return;
  if (const gguf::Array* a = value->as_array()) {
    if (static_cast<int64_t>(a->items.size()) != c.n_layers)
      throw Error(f.path() + ": " + key + " has " + std::to_string(a->items.size()) + " entries for block_count " +
                  std::to_string(c.n_layers));
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const gguf::Value& v = a->items[static_cast<size_t>(l)];
      std::optional<int64_t> flag = v.as_int();
      if (!flag)
        if (auto b = v.as_bool()) flag = *b ? 1 : 0;
      if (!flag) throw Error(f.path() + ": " + key + " holds a non-integer, non-boolean entry");
      if ((*flag != 0) != c.layer_is_local(l))
        throw Error(f.path() + ": " + key + " marks layer " + std::to_string(l) + (*flag ? " local" : " global") +
                    ", but " + std::string(row.gguf_name) + " alternates every " +
                    std::to_string(row.sliding_window.period) +
                    " layers (llama.cpp reads only a number there and would not follow the array)");
    }
    return;
  }
  const std::optional<int64_t> n = value->as_int();
  if (!n || *n < 0 || *n > (int64_t{1} << 32))
    throw Error(f.path() + ": " + key + " must be a period >= 0 or an array of per-layer flags");
  c.swa_period = *n;
}

// A key that is one integer for every layer or an array of one per layer (llama.cpp's
// get_key_or_arr): n_layers values, each in [lo, 2^32]. nullopt when the key is absent.
std::optional<std::vector<int64_t>> per_layer_ints(const gguf::GgufFile& f, const std::string& key, int64_t n_layers,
                                                   int64_t lo) {
  std::vector<int64_t> v;
  const gguf::Value* raw = f.find(key);
  if (!raw) return std::nullopt;
  if (const gguf::Array* a = raw->as_array()) {
    if (static_cast<int64_t>(a->items.size()) != n_layers)
      throw Error(f.path() + ": " + key + " has " + std::to_string(a->items.size()) + " entries for block_count " +
                  std::to_string(n_layers));
    for (const gguf::Value& x : a->items) {
      std::optional<int64_t> i = x.as_int();
      if (!i)
        if (auto b = x.as_bool()) i = *b ? 1 : 0;
      if (!i || *i < lo || *i > (int64_t{1} << 32))
        throw Error(f.path() + ": " + key + " holds an invalid entry (each must be an integer >= " +
                    std::to_string(lo) + ")");
      v.push_back(*i);
    }
    return v;
  }
  std::optional<int64_t> one = raw->as_int();
  if (!one)
    if (auto b = raw->as_bool()) one = *b ? 1 : 0;
  if (!one) throw Error(f.path() + ": metadata key '" + key + "' is neither an integer nor an array");
  if (*one < lo || *one > (int64_t{1} << 32))
    throw Error(f.path() + ": metadata key '" + key + "' has invalid value " + std::to_string(*one));
  return std::vector<int64_t>(static_cast<size_t>(n_layers), *one);
}

// Gemma 4's per-layer layout (SlidingWindowSpec::Pattern::PerLayerArray), read as llama.cpp
// b10587's gemma4 loader reads it and checked so that every derived shape is consistent:
// which layers are local, the local heads' size and rotary dims, the shared-KV layers and
// the layer each one reads, the per-layer embedding width, which layers have experts.
void read_per_layer_layout(const gguf::GgufFile& f, const std::string& p, ModelConfig& c) {
  const std::string pattern_key = p + "attention.sliding_window_pattern";
  auto pattern = per_layer_ints(f, pattern_key, c.n_layers, 0);
  if (!pattern) throw Error(f.path() + ": missing metadata key '" + pattern_key + "'");
  c.local_layers.clear();
  for (int64_t x : *pattern) {
    if (x > 1) throw Error(f.path() + ": " + pattern_key + " holds " + std::to_string(x) + " (each entry is a bool)");
    c.local_layers.push_back(static_cast<uint8_t>(x));
  }
  if (!f.has(p + "attention.sliding_window"))
    throw Error(f.path() + ": missing metadata key '" + p + "attention.sliding_window'");
  const bool any_local = std::find(c.local_layers.begin(), c.local_layers.end(), 1) != c.local_layers.end();
  if (any_local && c.sliding_window <= 0)
    throw Error(f.path() + ": " + pattern_key + " marks local layers but attention.sliding_window is 0");
  c.head_dim_local = require_positive(f, p + "attention.key_length_swa");
  const int64_t v_local = require_positive(f, p + "attention.value_length_swa");
  if (v_local != c.head_dim_local)
    throw Error(f.path() + ": attention.value_length_swa " + std::to_string(v_local) + " differs from key_length_swa " +
                std::to_string(c.head_dim_local) + " (unsupported)");
  c.n_rot_local = optional_positive(f, p + "rope.dimension_count_swa", c.n_rot);
  if (c.n_rot_local % 2 != 0 || c.n_rot_local > c.head_dim_local)
    throw Error(f.path() + ": rope.dimension_count_swa " + std::to_string(c.n_rot_local) +
                " must be even and <= key_length_swa " + std::to_string(c.head_dim_local));
  c.per_layer_dim = f.get_int(p + "embedding_length_per_layer_input").value_or(-1);
  if (c.per_layer_dim < 0 || c.per_layer_dim > 65536)
    throw Error(f.path() + ": " + p + "embedding_length_per_layer_input is " +
                (f.has(p + "embedding_length_per_layer_input") ? "out of range [0, 65536]" : "missing"));
  const int64_t shared = f.get_int(p + "attention.shared_kv_layers").value_or(0);
  if (shared < 0 || shared > c.n_layers)
    throw Error(f.path() + ": attention.shared_kv_layers " + std::to_string(shared) + " is outside [0, block_count " +
                std::to_string(c.n_layers) + "]");
  c.n_kv_shared = shared;
  // Each shared layer reads an earlier layer of its own kind that writes K/V (else its
  // heads, window and RoPE would not match what is stored).
  for (int64_t l = c.n_kv_layers_from_start(); l < c.n_layers; ++l) {
    const int64_t src = c.kv_source(l);
    const char* kind = c.layer_is_local(l) ? "local" : "global";
    if (src < 0 || src >= l || !c.has_own_kv(src))
      throw Error(f.path() + ": attention.shared_kv_layers " + std::to_string(shared) + " of " +
                  std::to_string(c.n_layers) + " layers: shared layer " + std::to_string(l) + " (" + kind +
                  ") would reuse the K/V of layer " + std::to_string(src) +
                  ", which is not an earlier layer with K/V of its own");
    if (c.layer_is_local(src) != c.layer_is_local(l))
      throw Error(f.path() + ": attention.shared_kv_layers " + std::to_string(shared) + ": shared layer " +
                  std::to_string(l) + " (" + kind + ") would reuse the K/V of layer " + std::to_string(src) + ", a " +
                  (c.layer_is_local(src) ? "local" : "global") + " layer (another head size and window)");
  }
  // Which layers have experts, which take V from K, and how the expert tensors are stored:
  // by the tensors present, as llama.cpp decides (ffn_gate_inp, attn_v, ffn_gate_up_exps).
  auto has = [&](const std::string& name) { return f.find_tensor(name) != nullptr; };
  c.moe_layers.assign(static_cast<size_t>(c.n_layers), 0);
  c.v_from_k.assign(static_cast<size_t>(c.n_layers), 0);
  int64_t n_moe = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    c.moe_layers[static_cast<size_t>(l)] = has(b + "ffn_gate_inp.weight");
    n_moe += c.moe_layers[static_cast<size_t>(l)];
    c.v_from_k[static_cast<size_t>(l)] = c.has_own_kv(l) && !has(b + "attn_v.weight");
    if (c.moe_layers[static_cast<size_t>(l)] && n_moe == 1) c.fused_gate_up_exps = has(b + "ffn_gate_up_exps.weight");
  }
  if (n_moe > 0 && c.n_expert == 0)
    throw Error(f.path() + ": layers have experts (ffn_gate_inp) but " + p + "expert_count is missing");
  if (n_moe == 0 && c.n_expert > 0)
    throw Error(f.path() + ": " + p + "expert_count is " + std::to_string(c.n_expert) +
                " but no layer has experts (ffn_gate_inp)");
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const gguf::GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch) throw Error(f.path() + ": missing metadata key 'general.architecture'");
  c.arch_name = *arch;
  const std::string p = *arch + ".";
  // llama with experts is the mixtral row.
  const ArchInfo* row = find_arch_by_gguf(*arch, f.get_int(p + "expert_count").value_or(0) > 0);
  if (!row)
    throw Error(f.path() + ": unsupported architecture '" + *arch + "' (supported: " + supported_gguf_arch_names() +
                ")");
  c.arch = row->arch;
  c.name = f.get_string("general.name").value_or("");
  c.dim = require_positive(f, p + "embedding_length");
  c.n_layers = require_positive(f, p + "block_count");
  // Gemma 4: feed_forward_length and head_count_kv may be per-layer arrays.
  const bool per_layer = row->sliding_window.pattern == SlidingWindowSpec::Pattern::PerLayerArray;
  if (per_layer) {
    c.ffn_by_layer = per_layer_ints(f, p + "feed_forward_length", c.n_layers, 1)
                         .value_or(std::vector<int64_t>{});
    if (c.ffn_by_layer.empty()) throw Error(f.path() + ": missing metadata key '" + p + "feed_forward_length'");
    c.ffn_dim = *std::max_element(c.ffn_by_layer.begin(), c.ffn_by_layer.end());
  } else {
    // Shared-expert rows (qwen35moe) may lack feed_forward_length, as llama.cpp allows: 0
    // until the MoE keys below fill it in.
    c.ffn_dim = row->moe.shared_expert ? optional_positive(f, p + "feed_forward_length", 0)
                                       : require_positive(f, p + "feed_forward_length");
  }
  c.n_heads = require_positive(f, p + "attention.head_count");
  if (per_layer) {
    c.n_kv_heads_by_layer = per_layer_ints(f, p + "attention.head_count_kv", c.n_layers, 1)
                                .value_or(std::vector<int64_t>(static_cast<size_t>(c.n_layers), c.n_heads));
    c.n_kv_heads = *std::max_element(c.n_kv_heads_by_layer.begin(), c.n_kv_heads_by_layer.end());
    for (int64_t l = 0; l < c.n_layers; ++l)
      if (c.n_heads % c.n_kv_heads_by_layer[static_cast<size_t>(l)] != 0)
        throw Error(f.path() + ": head_count " + std::to_string(c.n_heads) + " is not a multiple of layer " +
                    std::to_string(l) + "'s head_count_kv " + std::to_string(c.n_kv_heads_by_layer[static_cast<size_t>(l)]));
  } else {
    c.n_kv_heads = optional_positive(f, p + "attention.head_count_kv", c.n_heads);
  }
  c.ctx_len = optional_positive(f, p + "context_length", 2048);
  if (c.dim % c.n_heads != 0 && !f.has(p + "attention.key_length"))
    throw Error(f.path() + ": embedding_length " + std::to_string(c.dim) +
                " is not divisible by head_count " + std::to_string(c.n_heads));
  c.head_dim = optional_positive(f, p + "attention.key_length", c.dim / c.n_heads);
  int64_t v_len = optional_positive(f, p + "attention.value_length", c.head_dim);
  if (v_len != c.head_dim)
    throw Error(f.path() + ": attention.value_length " + std::to_string(v_len) +
                " differs from key_length " + std::to_string(c.head_dim) + " (unsupported)");
  if (c.n_heads % c.n_kv_heads != 0)
    throw Error(f.path() + ": head_count " + std::to_string(c.n_heads) +
                " is not a multiple of head_count_kv " + std::to_string(c.n_kv_heads));
  c.n_rot = optional_positive(f, p + "rope.dimension_count", c.head_dim);
  if (c.n_rot % 2 != 0 || c.n_rot > c.head_dim)
    throw Error(f.path() + ": rope.dimension_count " + std::to_string(c.n_rot) +
                " must be even and <= head dim " + std::to_string(c.head_dim));
  c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (!(c.rms_eps > 0.0f)) throw Error(f.path() + ": attention.layer_norm_rms_epsilon must be > 0");
  c.rope_theta = static_cast<float>(f.get_float(p + "rope.freq_base").value_or(10000.0));
  if (!(c.rope_theta > 1.0f)) throw Error(f.path() + ": rope.freq_base must be > 1");

  std::string scaling = f.get_string(p + "rope.scaling.type").value_or("none");
  double factor = f.get_float(p + "rope.scaling.factor").value_or(0.0);
  if (auto lin = f.get_float(p + "rope.scale_linear"); lin && scaling == "none") {
    scaling = "linear";
    factor = *lin;
  }
  if (scaling == "none" || factor == 0.0 || factor == 1.0) {
    c.rope_scaling = RopeScalingType::None;
  } else if (scaling == "linear" && row->supports(RopeScalingType::Linear)) {
    c.rope_scaling = RopeScalingType::Linear;
  } else if (scaling == "yarn" && row->supports(RopeScalingType::Yarn)) {
    c.rope_scaling = RopeScalingType::Yarn;
  } else {
    std::string supported = "none";
    for (RopeScalingType t : row->rope_scalings)
      if (t != RopeScalingType::None) supported += std::string(", ") + rope_scaling_name(t);
    throw Error(f.path() + ": unsupported rope.scaling.type '" + scaling + "' for " + *arch + " (supported: " +
                supported + ")");
  }
  if (c.rope_scaling != RopeScalingType::None) {
    if (!(factor > 0.0)) throw Error(f.path() + ": rope.scaling.factor must be > 0");
    c.rope_scaling_factor = static_cast<float>(factor);
  }
  c.rope_orig_ctx = optional_positive(f, p + "rope.scaling.original_context_length", c.ctx_len);
  c.rope_attn_factor = static_cast<float>(f.get_float(p + "rope.scaling.attn_factor").value_or(1.0));
  if (!(c.rope_attn_factor > 0.0f)) throw Error(f.path() + ": rope.scaling.attn_factor must be > 0");
  // LongRoPE has no rope.scaling.type: the factor tensors say it (llama.cpp's rule).
  if (const TensorSpec* lr = row->find(Role::RopeFactorsLong); lr && c.rope_scaling == RopeScalingType::None) {
    const bool has_long = f.find_tensor(gguf_tensor_name(*lr, 0)) != nullptr;
    const bool has_short = f.find_tensor(row->gguf_tensor(Role::RopeFactorsShort)) != nullptr;
    if (has_long != has_short)
      throw Error(f.path() + ": has only one of rope_factors_long.weight / rope_factors_short.weight");
    if (has_long) c.rope_scaling = RopeScalingType::LongRope;
  }

  // Sliding windows (model/arch_table.h SlidingWindowSpec): the key, else the row's default.
  const SlidingWindowSpec& sw = row->sliding_window;
  c.sliding_window = f.get_int(p + "attention.sliding_window").value_or(sw.default_window);
  if (c.sliding_window < 0 || c.sliding_window > (int64_t{1} << 32))
    throw Error(f.path() + ": attention.sliding_window has invalid value " + std::to_string(c.sliding_window));
  if (sw.window_required && !f.has(p + "attention.sliding_window"))
    throw Error(f.path() + ": missing metadata key '" + p + "attention.sliding_window' (" + *arch +
                " needs its window)");
  if (sw.window_required && c.sliding_window == 0)
    throw Error(f.path() + ": " + p + "attention.sliding_window must be > 0");
  if (sw.period_key) read_window_pattern(f, p, *row, c);
  if (sw.local_rope_base_key && c.sliding_window > 0) {
    if (auto base = f.get_float(p + "rope.freq_base_swa")) {
      c.rope_theta_local = static_cast<float>(*base);
      c.rope_local_scaled = true;
      if (!(c.rope_theta_local > 1.0f)) throw Error(f.path() + ": rope.freq_base_swa must be > 1");
    }
  }
  if (sw.local_rope_theta > 0.0f && c.sliding_window > 0) {
    c.rope_theta_local = static_cast<float>(f.get_float(p + "rope.freq_base_swa").value_or(sw.local_rope_theta));
    if (!(c.rope_theta_local > 1.0f)) throw Error(f.path() + ": rope.freq_base_swa must be > 1");
  }
  auto softcap = [&](const std::string& key, float fallback) {
    const float v = static_cast<float>(f.get_float(p + key).value_or(fallback));
    if (!(v >= 0.0f) || !std::isfinite(v)) throw Error(f.path() + ": " + key + " must be >= 0");
    return v;
  };
  if (row->attn_softcap) c.attn_softcap = softcap("attn_logit_softcapping", row->attn_softcap_default);
  if (row->final_softcap) c.final_softcap = softcap("final_logit_softcapping", row->final_softcap_default);
  c.attn_scale = row->fixed_attn_scale > 0.0f ? row->fixed_attn_scale : c.gguf_attention_scale();
  // llama.cpp's openai-moe graph takes n_rot as the head size (Q/K/V reshape, 1/sqrt(n_rot)).
  if (row->arch == Arch::GptOss && c.n_rot != c.head_dim)
    throw Error(f.path() + ": rope.dimension_count " + std::to_string(c.n_rot) + " differs from the head size " +
                std::to_string(c.head_dim) + " (" + *arch + " rotates whole heads)");
  // A mixture-of-experts file of a dense row fails here rather than on a missing ffn_gate.
  c.n_expert = f.get_int(p + "expert_count").value_or(0);
  if (c.n_expert > 0 && !row->has_experts())
    throw Error(f.path() + ": " + *arch + " with " + std::to_string(c.n_expert) +
                " experts (mixture of experts) is not supported");
  if (row->has_experts() && per_layer) {  // Gemma 4: experts only in 26B-A4B
    if (c.n_expert > 0) {
      c.n_expert_used = require_positive(f, p + "expert_used_count");
      c.expert_ffn_dim = require_positive(f, p + "expert_feed_forward_length");
      if (c.n_expert_used > c.n_expert || c.n_expert > 4096)
        throw Error(f.path() + ": " + p + "expert_used_count " + std::to_string(c.n_expert_used) +
                    " must be <= expert_count " + std::to_string(c.n_expert) + " (<= 4096)");
    }
  } else if (row->has_experts()) {
    c.n_expert = require_positive(f, p + "expert_count");
    c.n_expert_used = require_positive(f, p + "expert_used_count");
    if (c.n_expert_used > c.n_expert || c.n_expert > 4096)
      throw Error(f.path() + ": " + p + "expert_used_count " + std::to_string(c.n_expert_used) +
                  " must be <= expert_count " + std::to_string(c.n_expert) + " (<= 4096)");
    if (!row->moe.expert_ffn_key) {
      c.expert_ffn_dim = c.ffn_dim;
    } else if (row->moe.shared_expert && !f.has(p + "expert_feed_forward_length") && c.ffn_dim > 0) {
      // llama.cpp's qwen35moe fallback: n_ff / n_expert_used.
      c.expert_ffn_dim = c.ffn_dim / c.n_expert_used;
      if (c.expert_ffn_dim <= 0)
        throw Error(f.path() + ": no " + p + "expert_feed_forward_length, and feed_forward_length " +
                    std::to_string(c.ffn_dim) + " / expert_used_count " + std::to_string(c.n_expert_used) + " is 0");
    } else {
      c.expert_ffn_dim = require_positive(f, p + "expert_feed_forward_length");
    }
    if (row->moe.shared_expert) {
      c.shared_expert_ffn_dim = optional_positive(f, p + "expert_shared_feed_forward_length", c.ffn_dim);
      if (c.shared_expert_ffn_dim <= 0)
        throw Error(f.path() + ": missing metadata key '" + p + "expert_shared_feed_forward_length' (and no " + p +
                    "feed_forward_length to default it to)");
      if (c.ffn_dim == 0) c.ffn_dim = c.shared_expert_ffn_dim;
    }
  }

  if (row->linear_attention) read_linear_attention(f, p, *row, c);
  if (per_layer) read_per_layer_layout(f, p, c);

  if (auto pt = f.get_int(p + "pooling_type")) {
    if (*pt < 0 || *pt > 4)
      throw Error(f.path() + ": metadata key '" + p + "pooling_type' has invalid value " + std::to_string(*pt) +
                  " (0 none, 1 mean, 2 cls, 3 last, 4 rank)");
    c.pooling = static_cast<Pooling>(*pt);
  }

  if (auto vs = f.get_int(p + "vocab_size")) {
    c.n_vocab = *vs;
  } else if (const gguf::Array* toks = f.get_array("tokenizer.ggml.tokens")) {
    c.n_vocab = static_cast<int64_t>(toks->items.size());
  } else if (const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
             emb && emb->dims.size() == 2) {
    c.n_vocab = emb->dims[1];
  }
  if (c.n_vocab <= 0) throw Error(f.path() + ": cannot determine the vocabulary size");
  return c;
}

std::string ModelConfig::summary() const {
  std::string s = arch_name + " dim " + std::to_string(dim) + ", " + std::to_string(n_layers) +
                  " layers, " + std::to_string(n_heads) + " heads (" + std::to_string(n_kv_heads) +
                  " kv, head_dim " + std::to_string(head_dim) + "), ffn " + std::to_string(ffn_dim) +
                  ", vocab " + std::to_string(n_vocab) + ", ctx " + std::to_string(ctx_len);
  const SlidingWindowSpec& sw = info().sliding_window;
  if (sliding_window > 0 && sw.pattern == SlidingWindowSpec::Pattern::EveryNthGlobal)
    s += ", window " + std::to_string(sliding_window) + " (1 global layer in " +
         std::to_string(swa_period >= 0 ? swa_period : sw.period) + ")";
  if (info().nope_interval > 0) s += ", no RoPE on 1 layer in " + std::to_string(info().nope_interval);
  if (info().has(Role::AttnSinks)) s += ", attention sinks";
  if (n_expert > 0)
    s += ", " + std::to_string(n_expert_used) + " of " + std::to_string(n_expert) + " experts (ffn " +
         std::to_string(expert_ffn_dim) + ")" +
         (shared_expert_ffn_dim > 0 ? " + a shared expert (ffn " + std::to_string(shared_expert_ffn_dim) + ")" : "");
  if (!local_layers.empty()) {
    int64_t n_local = 0;
    for (uint8_t x : local_layers) n_local += x;
    s += ", window " + std::to_string(sliding_window) + " (" + std::to_string(n_layers - n_local) +
         " global layers, local head_dim " + std::to_string(head_dim_local) + ")";
    if (n_kv_shared > 0) s += ", " + std::to_string(n_kv_shared) + " shared-KV layers";
    if (per_layer_dim > 0) s += ", per-layer embeddings of " + std::to_string(per_layer_dim);
  }
  if (hybrid())
    s += ", " + std::to_string(n_recurrent_layers()) + " Gated DeltaNet layers (" + std::to_string(ssm_v_heads) +
         " heads of " + std::to_string(ssm_head_dim) + ")";
  return s;
}

}  // namespace pagoda
