// Benchmark workloads: deterministic streams of conversations ("jobs") made of
// words from a fixed list, and the OpenAI request bodies that carry them.
//
// Contract:
// - A Workload is immutable after construction; job(idx) is a pure function of
//   (options, idx) — the same seed gives the same prompts on any machine and in
//   any run order, and a run may draw as many jobs as its bounds allow. Any
//   number of threads may call job() concurrently (the token counter, when
//   given, must be thread-safe too; Tokenizer::encode is).
// - A job is one conversation: `random` and `shared-prefix` jobs have one turn,
//   `multi-turn` jobs have options.turns turns.
//   * random: one user message of uniform(0.8, 1.2) x input_len tokens.
//   * shared-prefix: the same system prompt of prefix_len tokens in every job
//     (drawn once from the seed) + a distinct question of input_len tokens.
//   * multi-turn: an optional system prompt of system_len tokens, its own in each
//     conversation (an agent's instructions, a document discussed), then `turns` user
//     messages of input_len tokens each; the caller
//     re-sends the whole history (system, users, the assistant's answers as
//     returned) with each turn.
//   * repeat: one user message of input_len tokens sent `turns` times, each time alone
//     (no history) and greedy (temperature 0): a retried agent step, a self-consistency
//     check. Every answer after the first is the first one again, the model's own text,
//     so a server that speculates from what it has seen decodes the retries faster.
// - Token counts: with a TokenCounter (the model's tokenizer) a text is grown or
//   shrunk word by word until it has the target count and the count is exact;
//   without one, lengths use 0.75 words per token (the usual English ratio for
//   Llama-family vocabularies) and counts are approximations (tokens_measured()
//   false), which reports label "approx".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::loadgen {

enum class WorkloadKind { kRandom, kSharedPrefix, kMultiTurn, kRepeat };
enum class Endpoint { kChat, kCompletions };

// "random" / "shared-prefix" / "multi-turn" / "repeat"; parse returns false on anything else.
std::string workload_name(WorkloadKind kind);
bool parse_workload(std::string_view name, WorkloadKind* out);
std::string endpoint_name(Endpoint e);  // "chat" / "completions"
bool parse_endpoint(std::string_view name, Endpoint* out);
std::string endpoint_path(Endpoint e);  // "/v1/chat/completions" / "/v1/completions"

struct WorkloadOptions {
  WorkloadKind kind = WorkloadKind::kRandom;
  int64_t input_len = 256;    // tokens per user message (random: the mean)
  int64_t output_len = 128;   // max_tokens (= min_tokens, ignore_eos) per request
  int64_t prefix_len = 2000;  // shared-prefix: system prompt tokens
  int64_t system_len = 0;     // multi-turn: each conversation's own system prompt tokens (0: none)
  int64_t turns = 5;          // multi-turn: turns per conversation
  uint64_t seed = 0;
};

// Number of tokens in a text (the model's tokenizer, without BOS).
using TokenCounter = std::function<int64_t(std::string_view)>;

struct Job {
  int64_t job_idx = 0;
  std::string system;                    // "" when none
  int64_t system_tokens = 0;
  std::vector<std::string> user;         // one per turn
  std::vector<int64_t> user_tokens;      // [turns], exact or approximate
  bool standalone = false;               // repeat: each turn sent alone (no history), greedy
};

class Workload {
 public:
  // `counter` may be empty (approximate lengths). Requires: lengths >= 1, turns >= 1.
  Workload(const WorkloadOptions& options, TokenCounter counter);

  Job job(int64_t job_idx) const;
  int turns_per_job() const;
  bool tokens_measured() const { return static_cast<bool>(counter_); }
  const WorkloadOptions& options() const { return options_; }

 private:
  WorkloadOptions options_;
  TokenCounter counter_;
  std::string shared_prefix_;
  int64_t shared_prefix_tokens_ = 0;
};

// The approximate token count of a text made of list words: ceil(words / 0.75).
int64_t approx_tokens(std::string_view text);

// The streaming request body for turn `turn_idx` of `job`, given the assistant's
// answers to the earlier turns ([turn_idx] strings). Chat: messages
// system? + (user, assistant)* + user. Completions: the same conversation as
// plain text ("User: ...\nAssistant: ...\n"), ending in "Assistant:".
// Always: stream, stream_options.include_usage, max_tokens = output_len; with
// fixed_output also min_tokens = output_len and ignore_eos (vLLM / llama-server /
// pagoda extensions; a strict OpenAI server may reject them). `model` is
// omitted when empty. `extra_body`: a JSON object (text) whose members are set last,
// replacing any of the same name (e.g. a logit_bias both servers under test accept);
// check it first with check_extra_body.
std::string request_body(Endpoint endpoint, const std::string& model, const Job& job, int turn_idx,
                         const std::vector<std::string>& answers, int64_t output_len,
                         bool fixed_output = true, const std::string& extra_body = "");

// Throws Error unless `extra_body` is empty or a JSON object that leaves the members
// the client reads the answer by (stream, stream_options, messages, prompt) alone.
void check_extra_body(const std::string& extra_body);

// Deterministic 64-bit generator (splitmix64): the same stream on every
// platform, unlike std::uniform_int_distribution whose output is unspecified.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t n) { return next() % n; }  // bias < n / 2^64: negligible
  double uniform01();                                // [0, 1)
  double exponential(double rate);                   // mean 1 / rate

 private:
  uint64_t state_;
};

}  // namespace pagoda::loadgen
