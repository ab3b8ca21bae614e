// The named byte-level BPE pre-tokenizers of GGUF files (`tokenizer.ggml.pre`):
// one table row per distinct behaviour, each a list of regexes plus flags.
//
// A GGUF `gpt2` vocabulary names its pre-tokenizer instead of describing it;
// the names and what they stand for are llama.cpp's (llama-vocab.cpp). Each
// regex of a row is applied in order, re-splitting every piece of the one
// before and keeping the text between matches as pieces of their own (HF's
// Split with behavior Isolated); the pieces are then mapped to the GPT-2 byte
// alphabet. The regexes are the ones the models' tokenizer.json files carry,
// in PCRE2 syntax. Where llama.cpp rewrote a pattern because std::regex lacks
// a feature (\p{Lu}, \p{M} in Tekken's and GPT-4o's letter runs), the row keeps
// the original, so pagoda follows HF `tokenizers` there (llama.cpp counts any
// non-ASCII letter as both upper and lower case, and a combining mark as no
// letter). The only rewrite kept is llama.cpp's case-insensitive contractions
// as explicit [sS] classes, which differ from (?i:'s|...) only on U+017F 'ſ'
// and U+212A KELVIN SIGN.
//
// The table is static and immutable; lookups may run on any thread.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenize.h"

namespace pagoda::tokenizer_detail {

struct NamedPreTokenizer {
  std::vector<std::string_view> names;    // values of tokenizer.ggml.pre; names[0] is the canonical one
  std::vector<std::string_view> regexes;  // applied in order, each with Isolated semantics
  bool ignore_merges = false;  // a word that is itself a token is not merged (HF BPE ignore_merges)
  bool add_bos = false;        // default when tokenizer.ggml.add_bos_token is absent
};

// Every row, in table order. Names are unique across the table.
std::span<const NamedPreTokenizer> named_pre_tokenizers();

// The row with this name among its names; nullptr when there is none.
const NamedPreTokenizer* find_named_pre_tokenizer(std::string_view name);

// The canonical names, comma-separated (for "supported: ..." messages).
std::string supported_pre_tokenizer_names();

// The pre-tokenizer steps of a row: one split per regex, then the byte-level
// map (without its own regex). Throws pagoda::Error if a regex does not
// compile (a bug in the table, pinned by a test).
std::vector<PreTokenizerStep> pre_tokenizer_steps(const NamedPreTokenizer& row);

// The row that behaves like `steps` (a tokenizer.json pre-tokenizer ending in
// the byte-level map): the first whose pieces are the same on a fixed set of
// texts built to tell the rows apart (digit runs of 1..7 ASCII and non-ASCII
// digits, CJK / kana / Hangul, case changes, contractions, punctuation runs,
// tabs, newline and space runs, combining marks), preferring a row with the
// same ignore_merges; nullptr when none cuts them all the same. Used to name
// the pre-tokenizer of a converted tokenizer.json.
const NamedPreTokenizer* match_named_pre_tokenizer(const std::vector<PreTokenizerStep>& steps,
                                                   bool ignore_merges);

// The texts match_named_pre_tokenizer compares on.
std::span<const std::string_view> pre_tokenizer_probe_texts();

}  // namespace pagoda::tokenizer_detail
