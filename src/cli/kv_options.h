// The KV-cache flags shared by generate / bench-model / logits:
// --kv-block-size, --kv-cache-bytes, --kv-type-k, --kv-type-v; and the pool
// they describe.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cache/prefix_cache_config.h"
#include "kv/paged_kv_pool.h"
#include "kv/paged_kv_store.h"
#include "model/config.h"
#include "model/model.h"
#include "spec/draft_planner.h"

namespace pagoda::cli {

struct KvOptions {
  int64_t block_size = kDefaultKvBlockSize;
  std::string cache_bytes;  // empty: the default fraction of available memory
  std::string type_k = "f16";
  std::string type_v = "f16";
  bool swa_full = false;

  void add_to(CLI::App& app);
  // Validates the flags (pagoda::Error naming the flag); budget_bytes is the request
  // (0: the default), not yet checked against memory. Call before loading the model.
  KvConfig resolve() const;
  // resolve() with the budget chosen for `model`, loaded (kv/kv_config.h,
  // choose_kv_budget): the default from what memory has left beside its weights, or the
  // request capped to it with a warning line in the log (common/log.h; stderr unless
  // `serve --log-file` moved it).
  KvConfig resolve_for(const Model& model) const;
};

// The prefix-cache flags (serve): --prompt-cache, --prompt-cache-bytes,
// --prompt-cache-max-entries, --prompt-cache-ttl, --prompt-cache-min-prefix.
struct PromptCacheOptions {
  std::string enabled = "on";
  std::string bytes = "unlimited";
  std::string max_entries = "unlimited";
  std::string ttl = "none";
  std::string min_prefix = "1";
  // The disk tier (cache/disk_tier.h): --prompt-cache-dir, --prompt-cache-disk-bytes,
  // --prompt-cache-disk-policy, --prompt-cache-disk-deadline-ms.
  std::string dir;
  std::string disk_bytes = "4GiB";
  std::string disk_policy = "evict";
  int64_t disk_deadline_ms = DiskTierConfig{}.io_deadline_ms;
  // Hybrid models (qwen35): --state-snapshot-bytes (auto: a quarter of the KV budget) and
  // --state-snapshot-interval (engine.h, EngineConfig).
  std::string state_snapshot_bytes = "auto";
  std::string state_snapshot_interval = "auto";

  void add_to(CLI::App& app);
  // Validates the flags (pagoda::Error naming the flag).
  PrefixCacheConfig resolve() const;
  DiskTierConfig resolve_disk() const;
  // --state-snapshot-bytes in bytes, 0 for auto.
  uint64_t resolve_state_snapshot_bytes() const;
  // --state-snapshot-interval in tokens, -1 for auto.
  int64_t resolve_state_snapshot_interval() const;
};

// Speculative decoding (serve, generate, bench): --spec-type, --draft-max, --draft-min,
// --spec-suffix-bytes, --spec-cost-ratio (spec/draft_planner.h). The model-free proposers are on by default:
// they never change the output, and the planner proposes nothing where it would not pay.
struct SpecOptions {
  std::string types = "suffix,ngram";
  int64_t draft_max = spec::SpecConfig{}.draft_max;
  int64_t draft_min = spec::SpecConfig{}.draft_min;
  std::string suffix_bytes = "32MiB";
  double cost_ratio = 0;  // SpecConfig::fixed_cost_ratio; 0: the measured cost line
  std::string model_draft;  // -md / --model-draft: turns the draft proposer on

  void add_to(CLI::App& app);
  // Validates the flags (pagoda::Error naming the flag).
  spec::SpecConfig resolve() const;
};

// A pool sized by `options` for `config`'s geometry, and a store over it.
struct KvCache {
  std::unique_ptr<PagedKvPool> pool;
  std::unique_ptr<PagedKvStore> store;
};
KvCache make_kv_cache(const Model& model, const KvOptions& options);

// Reserves positions [0, n_tokens) for `seq`; throws pagoda::Error with the
// pool's one-line message (both numbers) when the budget cannot hold them.
void reserve_or_throw(KvCache& kv, SeqId seq, int64_t n_tokens);

}  // namespace pagoda::cli
