// Grammar-constrained decoding cost (#13): the token mask per decode step.
//
//   BM_JsonMask/<vocab>/<mode>: drives a Matcher through the tokens of a valid
//     JSON document (tokenized by pagoda's tokenizer) under the grammar pagoda's JSON
//     Schema converter makes of a nested schema (strings, bounded integers, numbers, an
//     enum, arrays of objects via $ref, a free-form value), timing
//     fill_next_token_bitmask per step.
//     vocab 0 = mistral-7b-v0.1 (32,000 tokens, SPM-style BPE), 1 = qwen3 (151,669,
//     byte-level BPE). mode 0 = cold (mask cache off: every step walks the trie),
//     1 = first pass (cache on, emptied before each pass: only states repeated within
//     the document hit), 2 = warm (cache kept across passes).
//     Counters: mask_us (mean per step, thread CPU time), max_mask_us (worst step), steps.
//     Each step also checks that the document's next token is in the mask.
//   BM_VocabBuild/<vocab>: building the TokenVocabulary (sort + trie) once.
// Needs ../shared/models/{mistral-7b-v0.1,qwen3}-tokenizer; skips a vocabulary
// whose tokenizer.json is missing.
#include <benchmark/benchmark.h>

#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"
#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

using grammar::Grammar;
using grammar::GrammarLimits;
using grammar::Matcher;
using grammar::TokenVocabulary;

#ifndef PAGODA_SHARED_DIR
#define PAGODA_SHARED_DIR "../shared"
#endif

// The nested schema the document below satisfies, compiled by pagoda's own JSON Schema
// converter (the grammar a response_format request gets): objects with required and
// optional properties, an enum, arrays of strings, numbers and objects, and a free-form
// value.
constexpr const char* kPersonSchema = R"JSON({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer", "minimum": 0, "maximum": 200},
    "role": {"enum": ["admin", "editor", "viewer", "guest"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string"},
        "country": {"type": "string"}},
      "required": ["street", "city", "zip"], "additionalProperties": false},
    "scores": {"type": "array", "items": {"type": "number"}},
    "friends": {"type": "array", "items": {"$ref": "#/$defs/friend"}},
    "meta": {}
  },
  "required": ["name", "age", "role", "tags", "address", "scores", "friends", "meta"],
  "additionalProperties": false,
  "$defs": {"friend": {"type": "object", "properties": {"name": {"type": "string"}, "since": {"type": "integer"}},
                       "required": ["name", "since"], "additionalProperties": false}}
})JSON";

const std::string& json_gbnf() {
  static const std::string g = grammar::json_schema_output_gbnf(nlohmann::ordered_json::parse(kPersonSchema));
  return g;
}

constexpr const char* kJsonDocument = R"JSON({
  "name": "Ada Lovelace-Byron (Countess of Lovelace)",
  "age": 36,
  "role": "editor",
  "tags": ["mathematics", "analytical engine", "poetry", "notes on the Menabrea memoir", "Bernoulli numbers"],
  "address": {
    "street": "12 St James's Square",
    "city": "London",
    "zip": "SW1Y 4JH",
    "country": "United Kingdom"
  },
  "scores": [98.5, 87, 1.5e3, -0.25, 100],
  "friends": [
    {"name": "Charles Babbage", "since": 1833},
    {"name": "Mary Somerville", "since": 1834},
    {"name": "Augustus De Morgan", "since": 1840},
    {"name": "Michael Faraday", "since": 1844}
  ],
  "meta": {"source": "biography", "verified": true, "revisions": [1, 2, 3], "notes": {"language": "en", "unicode": "Ünïcödé — “quotes” 数学 🚀", "escaped": "line\nbreak \"quoted\" \\ slash"}, "rating": null}
})JSON";

struct VocabCase {
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<const TokenVocabulary> vocab;
  std::vector<TokenId> doc_tokens;
};

// Per-step times are thread CPU time: the bench machine is shared, and wall time
// there counts other processes' slices (2x at times).
double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

const char* vocab_dir(int which) { return which == 0 ? "mistral-7b-v0.1-tokenizer" : "qwen3-tokenizer"; }

std::shared_ptr<const TokenVocabulary> make_vocab(const Tokenizer& tok) {
  std::vector<std::string> pieces(tok.n_vocab());
  std::vector<int32_t> eog;
  std::vector<bool> disallowed(tok.n_vocab(), false);
  for (TokenId id = 0; id < tok.n_vocab(); ++id) {
    pieces[id] = tok.token_to_piece(id, /*render_special=*/false);
    if (tok.is_eog(id)) eog.push_back(id);
    else if (tok.is_special(id)) disallowed[id] = true;
  }
  return std::make_shared<TokenVocabulary>(std::move(pieces), std::move(eog), std::move(disallowed));
}

VocabCase* load(int which) {
  static std::unique_ptr<VocabCase> cases[2];
  if (cases[which]) return cases[which].get();
  std::string dir = std::string(PAGODA_SHARED_DIR) + "/models/" + vocab_dir(which);
  if (!std::filesystem::exists(dir + "/tokenizer.json")) return nullptr;
  auto c = std::make_unique<VocabCase>();
  c->tok = Tokenizer::from_hf_json(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  c->vocab = make_vocab(*c->tok);
  c->doc_tokens = c->tok->encode(kJsonDocument, /*add_special=*/false, /*parse_special=*/false);
  cases[which] = std::move(c);
  return cases[which].get();
}

void BM_JsonMask(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const int mode = static_cast<int>(state.range(1));
  VocabCase* c = load(which);
  if (!c) {
    state.SkipWithError("tokenizer.json not found");
    return;
  }
  GrammarLimits limits;
  if (mode == 0) limits.mask_cache_bytes = 0;
  auto g = Grammar::from_gbnf(json_gbnf(), "root", limits);
  Matcher m(g, c->vocab);
  std::vector<uint32_t> mask((c->vocab->size() + 31) / 32);
  const auto eog = [&] {
    for (TokenId id = 0; id < c->tok->n_vocab(); ++id)
      if (c->tok->is_eog(id)) return id;
    return TokenId{-1};
  }();
  double total_us = 0, max_us = 0;
  // PAGODA_BENCH_VERBOSE=1: print the steps over 1 ms (state and allowed count).
  const bool verbose = std::getenv("PAGODA_BENCH_VERBOSE") != nullptr;
  size_t steps = 0;
  for (auto _ : state) {
    if (mode == 1) g->impl().mask_cache.clear();
    m.reset();
    for (size_t k = 0; k <= c->doc_tokens.size(); ++k) {
      const double t0 = thread_cpu_us();
      m.fill_next_token_bitmask(mask);
      const double us = thread_cpu_us() - t0;
      total_us += us;
      max_us = std::max(max_us, us);
      if (verbose && us > 1000) {
        size_t allowed = 0;
        for (uint32_t w : mask) allowed += static_cast<size_t>(__builtin_popcount(w));
        std::fprintf(stderr, "step %zu: %.0f us, %zu allowed, after '%s'\n", k, us, allowed,
                     c->tok->decode(std::span<const TokenId>(c->doc_tokens.data(), k)).c_str());
      }
      ++steps;
      TokenId next = k < c->doc_tokens.size() ? c->doc_tokens[k] : eog;
      if (next < 0) break;
      if (!((mask[next >> 5] >> (next & 31)) & 1) || !m.accept_token(next)) {
        state.SkipWithError(("document token " + std::to_string(k) + " (" + c->tok->token_to_piece(next) +
                             ") rejected by the grammar")
                                .c_str());
        return;
      }
    }
    if (!m.is_terminated()) {
      state.SkipWithError("matcher not terminated after EOG");
      return;
    }
  }
  state.counters["mask_us"] = total_us / static_cast<double>(steps);
  state.counters["max_mask_us"] = max_us;
  state.counters["steps"] = static_cast<double>(c->doc_tokens.size() + 1);
  state.counters["vocab"] = c->vocab->size();
  state.counters["cache_entries"] = static_cast<double>(g->impl().mask_cache.entries());
  state.SetLabel(vocab_dir(which));
}
BENCHMARK(BM_JsonMask)
    ->ArgsProduct({{0, 1}, {0, 1, 2}})
    ->ArgNames({"vocab", "mode"})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);

void BM_VocabBuild(benchmark::State& state) {
  VocabCase* c = load(static_cast<int>(state.range(0)));
  if (!c) {
    state.SkipWithError("tokenizer.json not found");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(make_vocab(*c->tok));
  state.counters["vocab"] = c->vocab->size();
  state.counters["trie_nodes"] = static_cast<double>(c->vocab->impl().nodes.size());
}
BENCHMARK(BM_VocabBuild)->Arg(0)->Arg(1)->ArgNames({"vocab"})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pagoda

BENCHMARK_MAIN();
