// Vocab — the tables behind a Tokenizer (internal to src/tokenizer/).
//
// The two loaders (load_gguf.cpp, load_hf.cpp) fill a Vocab, call finalize(),
// and hand it to the Tokenizer, which never changes it again; encoding and
// decoding read it from any thread.
//
// Invariants (checked by finalize()):
//   1. tokens.size() == n_vocab; every id stored anywhere is in [0, n_vocab).
//   2. text_index maps each token's text to its id (the last id wins for the
//      rare duplicated text, as in llama.cpp).
//   3. merges only name ids in range, and a merge's result is the token whose
//      text is the concatenation of its two parts (the loaders check this as
//      they build the table, after finalize()).
//   4. add_bos => bos >= 0, add_eos => eos >= 0.
//   5. added_by_first_byte[b] lists the added tokens whose content starts with
//      byte b, longest content first (so the first hit is the longest match).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tables.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::tokenizer_detail {

// GGUF token types (llama.cpp's llama_token_type numbering, minus UNDEFINED).
enum class TokenKind : uint8_t { normal, unknown, control, user_defined, unused, byte };

struct TokenEntry {
  std::string text;   // raw vocabulary string
  std::string piece;  // the bytes it decodes to (special tokens: their text)
  float score = 0;    // SPM merge priority; unused by BPE
  TokenKind kind = TokenKind::normal;
};

// A token recognised in raw text before normalization (HF added_tokens; in
// GGUF the control, unknown and user-defined tokens).
struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool special = true;  // matched only with parse_special
  bool lstrip = false;  // also swallows whitespace on its left
  bool rstrip = false;  // ... and on its right
};

enum class Algorithm : uint8_t {
  spm_scores,  // llama.cpp llm_tokenizer_spm: merge the best-scoring adjacent pair
  bpe_ranks,   // HF BPE: merge the lowest-rank adjacent pair
};

struct MergeRule {
  int32_t rank = 0;
  TokenId result = -1;
};

inline uint64_t merge_key(TokenId left, TokenId right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Vocab {
  std::string source;      // file path, for error messages
  std::string model_name;  // "llama", "gpt2" or "gemma4"
  Algorithm algorithm = Algorithm::bpe_ranks;
  std::vector<TokenEntry> tokens;
  TextIndex text_index;                    // text -> id over `tokens`
  std::array<TokenId, 256> byte_tokens{};  // <0xNN> token per byte, -1 when absent
  FlatMap64<MergeRule> merges;             // key: merge_key(left, right)

  bool ignore_merges = false;  // a word that is itself a token is not merged (Llama 3)
  // A word of newlines only that is itself a token is not merged (Gemma 4: llama.cpp's
  // fix for its "\n\n"-style tokens, which its merges do not build).
  bool newline_words_whole = false;
  bool byte_fallback = false;  // unknown characters become <0xNN> tokens (BPE)
  bool fuse_unk = false;       // consecutive unknown characters give one <unk> (BPE)

  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<AddedToken> added_tokens;
  std::array<std::vector<uint32_t>, 256> added_by_first_byte;  // indices into added_tokens

  TokenId bos = -1, eos = -1, unk = -1, pad = -1;
  std::optional<TokenId> eot, eom;
  std::vector<TokenId> eog;  // sorted
  bool add_bos = false, add_eos = false;
  bool strip_leading_space = false;  // decode drops one leading space (SPM)

  Vocab() { byte_tokens.fill(-1); }

  int32_t n_vocab() const { return static_cast<int32_t>(tokens.size()); }
  bool in_range(int64_t id) const { return id >= 0 && id < static_cast<int64_t>(tokens.size()); }

  // (Re)builds text_index from the token texts.
  void build_text_index() {
    text_index.build(n_vocab(), [this](int32_t id) { return std::string_view(tokens[id].text); });
  }
  // The token with this exact text, if any.
  std::optional<TokenId> find(std::string_view text) const {
    return text_index.find(text, [this](int32_t id) { return std::string_view(tokens[id].text); });
  }
  // A token the BPE/SPM model may produce from text: not control / unknown.
  std::optional<TokenId> find_model_token(std::string_view text) const {
    auto id = find(text);
    if (!id) return std::nullopt;
    const TokenKind k = tokens[*id].kind;
    if (k == TokenKind::control || k == TokenKind::unknown) return std::nullopt;
    return id;
  }
  bool is_special(TokenId id) const {
    const TokenKind k = tokens[id].kind;
    return k == TokenKind::control || k == TokenKind::unknown;
  }

  // Builds text_index (when empty), the byte-token table (from "<0xNN>" texts
  // when empty), the added-token index and the EOT/EOG sets; checks the
  // invariants. Throws pagoda::Error naming `source` on a violation.
  void finalize();
};

// The model step: appends the ids of one word (SPM: one normalized run).
void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);
void bpe_tokenize(const Vocab& vocab, std::string_view word, std::vector<TokenId>& out);

// "<0x0A>" -> 0x0A; -1 when `text` is not a byte-token spelling.
int parse_byte_token(std::string_view text);

}  // namespace pagoda::tokenizer_detail
