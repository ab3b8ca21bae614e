// Tokenizer — text <-> token ids for Llama-family models, loaded from GGUF
// metadata or from a Hugging Face tokenizer.json.
//
// Contract:
// - Two algorithms behind one interface:
//   * SentencePiece-style ("llama"): GGUF `tokenizer.ggml.model = llama`. Spaces
//     become '▁', a '▁' is put in front of each run of text that starts the input
//     or follows a special token (add_space_prefix), adjacent pieces merge by
//     vocabulary score, and characters outside the vocabulary fall back to
//     <0xNN> byte tokens. The same ids as llama.cpp's SPM tokenizer (spm.cpp
//     names two deliberate differences, on text spelling "<0xNN>" and on
//     invalid UTF-8).
//   * BPE by merge rank: GGUF `tokenizer.ggml.model = gpt2` (byte-level BPE with
//     the pre-tokenizer regexes named by `tokenizer.ggml.pre`) and every
//     tokenizer.json with a BPE model — byte-level (Llama 3, Qwen2/3) or
//     SentencePiece-converted with byte fallback (Mistral, Llama 2), whose
//     model_name() is then "llama". Follows HF `tokenizers` semantics. GGUF
//     `tokenizer.ggml.model = gemma4` is of the second kind: merges over '▁'-spaced
//     raw UTF-8, cut into runs of newlines and of the rest, byte fallback (the
//     same ids as llama.cpp's gemma4 vocabulary).
// - Special tokens (GGUF token types 3 "control" and 2 "unknown" /
//   tokenizer.json added tokens with special=true) are recognised in text only when encode(parse_special)
//   is true; user-defined tokens (type 4 / added tokens with special=false) are
//   always recognised. Matching is leftmost-longest, before any normalization.
// - decode() is the exact concatenation of token_to_piece() (no HF
//   clean_up_tokenization_spaces), except that for SPM-style vocabularies one
//   leading space is dropped from the first non-empty piece that is not BOS: the
//   space that add_space_prefix put there (HF's Strip decoder; llama.cpp keeps
//   it when it removes a BOS). Hence decode(encode(s, any, false), true) == s
//   for any bytes s that contain no added/user-defined token text (after one of
//   those, SPM starts a new '▁'-prefixed run, as llama.cpp and HF do) and, for
//   Qwen's NFC normalizer, are NFC.
// - Ownership and threads: a Tokenizer is immutable after from_*() returns and
//   owns all its tables (it keeps no reference to the GgufFile or JSON files);
//   any number of threads may call its const methods concurrently. It is
//   non-copyable (a vocabulary is tens of MB). Load time in Release: 0.2-0.5 s
//   for the 9-11 MB Llama 3 / Qwen3 tokenizer.json files, ~10 ms for a
//   32k-token GGUF vocabulary once the file is open.
// - Failures: a malformed or unsupported tokenizer description throws
//   pagoda::Error with one line naming the file/key and the problem. Passing an
//   id outside [0, n_vocab()) to a per-token accessor is caller misuse and fails
//   a PAGODA_CHECK; decode() validates ids and throws pagoda::Error instead,
//   because its ids often come straight from a request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

namespace gguf {
class GgufFile;
}

using TokenId = int32_t;

namespace tokenizer_detail {
struct Vocab;
}

class Tokenizer {
 public:
  // Reads the `tokenizer.ggml.*` keys (tensors are not needed: vocab-only files
  // work). Throws pagoda::Error when they are missing, inconsistent (array
  // lengths, ids out of range) or name an unsupported model / pre-tokenizer.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::GgufFile& f);

  // Reads a tokenizer.json (model type BPE only) and, when the path is not
  // empty, a tokenizer_config.json for bos/eos tokens and add_bos/add_eos.
  // Without a config (or without add_bos_token in it), BOS/EOS insertion follows
  // the post_processor (TemplateProcessing), as HF does. NFC normalizers are
  // accepted and treated as identity: inputs must already be NFC.
  static std::unique_ptr<Tokenizer> from_hf_json(const std::string& tokenizer_json_path,
                                                 const std::string& tokenizer_config_path = "");

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: prepend BOS when add_bos() and append EOS when the model says
  // add_eos. parse_special: text spelling a special token ("<|eot_id|>", "<s>")
  // becomes that token; otherwise it is tokenized as plain text. Bytes that are
  // not valid UTF-8 are tokenized as single characters (byte tokens where the
  // vocabulary has them), not rejected. Linear in the text length in practice
  // (1 MB of spaces: 0.4 s with Llama 3); throws pagoda::Error only if PCRE2
  // hits its match limit, which no realistic input reaches.
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes one token stands for: byte tokens <0xNN> give that byte, '▁' gives
  // ' ', byte-level BPE text gives the original bytes, special tokens give their
  // text when render_special and "" otherwise. May be a fragment of a UTF-8
  // character. Requires: 0 <= id < n_vocab().
  std::string token_to_piece(TokenId id, bool render_special = true) const;

  // The text of ids (see the contract for the leading-space rule). skip_special
  // drops special tokens (control and unknown). The result is raw bytes: it is
  // not checked for UTF-8 validity. Throws pagoda::Error for an id out of range.
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;

  // The raw vocabulary string ("▁Hello", "Ġworld", "<0x0A>", "<|eot_id|>").
  // Requires: 0 <= id < n_vocab().
  const std::string& token_text(TokenId id) const;

  // Looks up a token by its raw vocabulary string; nullopt when absent.
  std::optional<TokenId> find_token(std::string_view text) const;

  int32_t n_vocab() const;
  TokenId bos() const;  // -1 when the model has none
  TokenId eos() const;  // -1 when the model has none
  std::optional<TokenId> eot() const;  // end of turn (<|eot_id|>, <|im_end|>, ...)
  // End of generation: EOS, EOT, EOM and the other stop tokens by name
  // (<|eot_id|>, <|end_of_text|>, <|im_end|>, <|endoftext|>, <end_of_turn>, ...).
  bool is_eog(TokenId id) const;
  // Control or unknown tokens (the ones skip_special / render_special act on).
  bool is_special(TokenId id) const;
  bool add_bos() const;
  bool add_eos() const;
  // True when decode drops the leading space of the text (SPM-style vocabularies).
  bool strips_leading_space() const;
  // "llama" for SentencePiece-style vocabularies, "gpt2" for byte-level BPE, "gemma4".
  std::string model_name() const;

 private:
  explicit Tokenizer(std::unique_ptr<tokenizer_detail::Vocab> vocab);
  const tokenizer_detail::Vocab& vocab() const { return *vocab_; }

  std::unique_ptr<const tokenizer_detail::Vocab> vocab_;
};

struct StreamDecoderOptions {
  // Emit the text of special tokens (e.g. "<|eot_id|>"); off for user-facing text.
  bool render_special = false;
  // The first pushed token starts the text (e.g. the prompt was BOS only), so
  // the SPM leading space is dropped from it, as decode() does.
  bool at_text_start = false;
};

// Streaming decode for one sequence: push ids one at a time and get the text
// that is safe to emit. Bytes of an incomplete UTF-8 character are held back
// until it completes; bytes that can never form a character are emitted as
// U+FFFD, so every returned string is valid UTF-8. flush() returns what is held
// (an unfinished character becomes U+FFFD) and resets the decoder.
// The Tokenizer must outlive the decoder. One thread at a time per decoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, StreamDecoderOptions options = {});

  // Requires: 0 <= id < tokenizer.n_vocab().
  std::string push(TokenId id);
  std::string flush();
  // Bytes currently held back (0..3).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  StreamDecoderOptions options_;
  bool at_start_;
  std::string pending_;
};

}  // namespace pagoda
