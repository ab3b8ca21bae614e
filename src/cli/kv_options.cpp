#include "cli/kv_options.h"

#include <charconv>
#include <cstdio>

#include "common/error.h"
#include "common/log.h"
#include "common/process_memory.h"
#include "common/system_memory.h"

namespace pagoda::cli {

void KvOptions::add_to(CLI::App& app) {
  app.add_option("--kv-block-size", block_size, "Tokens per KV block (power of two, 8..256)")
      ->capture_default_str();
  app.add_option("--kv-cache-bytes", cache_bytes,
                 "KV budget, e.g. 512MiB, 4GiB (default: the memory left beside the weights, less headroom; "
                 "committed only as used)");
  app.add_option("--kv-type-k", type_k, "K cache type: f16|bf16|f32|q8|q4")->capture_default_str();
  app.add_option("--kv-type-v", type_v, "V cache type: f16|bf16|f32|q8|q4")->capture_default_str();
  app.add_flag("--kv-swa-full", swa_full,
               "Sliding-window layers (Gemma 2/3) keep the whole context instead of only their window");
}

KvConfig KvOptions::resolve() const {
  KvConfig kc;
  validate_kv_block_size(block_size, "--kv-block-size");
  kc.block_size = static_cast<int>(block_size);
  kc.k_type = parse_kv_type_flag(type_k, "--kv-type-k");
  kc.v_type = parse_kv_type_flag(type_v, "--kv-type-v");
  kc.swa_full = swa_full;
  if (!cache_bytes.empty()) {
    kc.budget_bytes = parse_byte_size(cache_bytes, "--kv-cache-bytes");
    if (kc.budget_bytes == 0) throw Error("--kv-cache-bytes must be greater than 0");
  }
  return kc;
}

KvConfig KvOptions::resolve_for(const Model& model) const {
  KvConfig kc = resolve();
  // The weights' file pages read in place are still "available" to the kernel (page
  // cache); their repacked copies are anonymous memory, already taken out of it.
  const uint64_t resident = model.resident_weight_bytes();
  const uint64_t anon = read_process_memory().anon_bytes;
  const KvBudgetChoice choice = choose_kv_budget(kc.budget_bytes, read_system_memory(), resident > anon ? resident - anon : 0);
  if (choice.capped) logger().write(LogLevel::Warn, "pagoda: warning: " + choice.warning);
  kc.budget_bytes = choice.bytes;
  return kc;
}

void SpecOptions::add_to(CLI::App& app) {
  app.add_option("--spec-type", types,
                 "Speculative decoding proposers, comma-separated: suffix (earlier requests' prompts and answers), "
                 "ngram (the request's own tokens), draft (a draft model, -md), or none")
      ->capture_default_str();
  app.add_option("--draft-max", draft_max, "Proposed tokens verified per sequence and step at most")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{64}));
  app.add_option("--draft-min", draft_min, "Shorter proposals are not verified")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{64}));
  app.add_option("--spec-suffix-bytes", suffix_bytes, "Memory of the suffix proposer's index (e.g. 32MiB)")
      ->capture_default_str();
  app.add_option("--spec-cost-ratio", cost_ratio,
                 "Plan proposals with this fixed ratio of a verified row's cost to a step's instead of the "
                 "measured one (0: measure); for plans that do not depend on how busy the machine is")
      ->capture_default_str()->check(CLI::Range(0.0, 100.0));
  app.add_option("--model-draft", model_draft,
                 "Draft model for speculative decoding (-md; GGUF with the model's vocabulary): adds 'draft' to --spec-type");
}

spec::SpecConfig SpecOptions::resolve() const {
  spec::SpecConfig c;
  c.draft_max = draft_max;
  c.draft_min = draft_min;
  if (draft_min > draft_max)
    throw Error("--draft-min (" + std::to_string(draft_min) + ") must not exceed --draft-max (" +
                std::to_string(draft_max) + ")");
  c.suffix_bytes = parse_byte_size(suffix_bytes, "--spec-suffix-bytes");
  c.fixed_cost_ratio = cost_ratio;
  c = spec::parse_spec_types(types, c);
  if (!model_draft.empty()) {
    if (types == "none") throw Error("-md " + model_draft + ": --spec-type none turns speculative decoding off");
    c.draft = true;
  }
  if (c.draft && model_draft.empty()) throw Error("--spec-type draft needs a draft model (-md FILE)");
  return c;
}

void PromptCacheOptions::add_to(CLI::App& app) {
  app.add_option("--prompt-cache", enabled, "Prefix cache on|off")->capture_default_str();
  app.add_option("--prompt-cache-bytes", bytes,
                 "Cap on cached KV bytes no request uses (e.g. 2GiB, or unlimited: only pool pressure evicts)")
      ->capture_default_str();
  app.add_option("--prompt-cache-max-entries", max_entries, "Cap on cached sequences (or unlimited)")
      ->capture_default_str();
  app.add_option("--prompt-cache-ttl", ttl, "Drop cached blocks unused this long: 300s, 5m, 1.5h, or none")
      ->capture_default_str();
  app.add_option("--prompt-cache-min-prefix", min_prefix, "Shortest cached prefix (tokens) worth reusing")
      ->capture_default_str();
  app.add_option("--prompt-cache-dir", dir,
                 "Second cache tier on disk: KV blocks evicted from RAM (or all, see the policy) are kept in DIR "
                 "and read back instead of recomputed, across restarts");
  app.add_option("--prompt-cache-disk-bytes", disk_bytes,
                 "Cap on the disk tier's real bytes on disk (records, directory, lock file); LRU beyond it")
      ->capture_default_str();
  app.add_option("--prompt-cache-disk-policy", disk_policy,
                 "evict: write blocks as RAM evicts them (and the rest at shutdown); all: write every full block "
                 "once computed (write-through: survives kill -9)")
      ->capture_default_str();
  app.add_option("--prompt-cache-disk-deadline-ms", disk_deadline_ms,
                 "A disk-tier block read or write taking longer than this marks the tier stalled (a hung mount): "
                 "restores become misses until it returns, and /health says so")
      ->capture_default_str();
  app.add_option("--state-snapshot-bytes", state_snapshot_bytes,
                 "Hybrid models (Qwen 3.5/3.6): KV budget share for recurrent-state snapshots, the prefix cache's "
                 "other half (auto: a quarter of the budget)")
      ->capture_default_str();
  app.add_option("--state-snapshot-interval", state_snapshot_interval,
                 "Hybrid models: snapshot the recurrent state every N prompt tokens, so prompts sharing a long "
                 "prefix resume near where they part (0: only at prompt and sequence ends; auto: the tokens whose "
                 "K/V takes one snapshot's bytes)")
      ->capture_default_str();
}

int64_t PromptCacheOptions::resolve_state_snapshot_interval() const {
  if (state_snapshot_interval == "auto") return -1;
  int64_t n = -1;
  const auto [end, ec] = std::from_chars(state_snapshot_interval.data(),
                                         state_snapshot_interval.data() + state_snapshot_interval.size(), n);
  if (ec != std::errc() || end != state_snapshot_interval.data() + state_snapshot_interval.size() || n < 0)
    throw Error("--state-snapshot-interval must be a token count >= 0 or auto (got '" + state_snapshot_interval + "')");
  return n;
}

uint64_t PromptCacheOptions::resolve_state_snapshot_bytes() const {
  if (state_snapshot_bytes == "auto") return 0;
  const uint64_t b = parse_byte_size(state_snapshot_bytes, "--state-snapshot-bytes");
  if (b == 0) throw Error("--state-snapshot-bytes must be greater than 0 (or auto)");
  return b;
}

DiskTierConfig PromptCacheOptions::resolve_disk() const {
  DiskTierConfig d;
  d.dir = dir;
  d.capacity_bytes = parse_byte_size(disk_bytes, "--prompt-cache-disk-bytes");
  d.policy = parse_disk_policy(disk_policy);
  if (disk_deadline_ms < 1 || disk_deadline_ms > 3'600'000)
    throw Error("--prompt-cache-disk-deadline-ms must be in [1, 3600000] (got " + std::to_string(disk_deadline_ms) + ")");
  d.io_deadline_ms = static_cast<int>(disk_deadline_ms);
  return d;
}

PrefixCacheConfig PromptCacheOptions::resolve() const {
  PrefixCacheConfig c;
  c.enabled = parse_prompt_cache_switch(enabled);
  c.capacity_bytes = parse_prompt_cache_bytes(bytes);
  c.max_entries = parse_prompt_cache_max_entries(max_entries);
  c.ttl_ms = parse_prompt_cache_ttl(ttl);
  c.min_prefix_tokens = parse_prompt_cache_min_prefix(min_prefix);
  return c;
}

KvCache make_kv_cache(const Model& model, const KvOptions& options) {
  KvCache kv;
  const ModelConfig& c = model.config();
  const KvConfig kc = options.resolve_for(model);
  KvLayerGroups groups = KvLayerGroups::for_layers(c.kv_layer_shapes(), kc.swa_full);
  kv.pool = std::make_unique<PagedKvPool>(
      KvGeometry{groups.page_layers, c.n_kv_heads, c.head_dim, groups.n_groups(), groups.slot_shapes}, kc);
  kv.store = std::make_unique<PagedKvStore>(*kv.pool, std::move(groups));
  configure_recurrent_states(c, kv.store->recurrent_states());
  return kv;
}

void reserve_or_throw(KvCache& kv, SeqId seq, int64_t n_tokens) {
  AllocResult r = kv.store->reserve(seq, n_tokens);
  if (!r.ok()) throw Error(r.message);
}

}  // namespace pagoda::cli
