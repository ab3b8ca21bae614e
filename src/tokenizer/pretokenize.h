// Text-to-words stages of the tokenizer: normalizers (applied to each run of
// text between added tokens) and pre-tokenizers (which cut a normalized run
// into the words the BPE/SPM model sees), following HF `tokenizers`
// semantics, plus the GPT-2 byte-level alphabet.
//
// Regexes are PCRE2 in UTF + UCP mode, so \p{L}, \p{N}, \s are Unicode
// classes as in Oniguruma (which HF uses) and llama.cpp's tables; bytes that
// are not valid UTF-8 never match (PCRE2_MATCH_INVALID_UTF) and therefore end
// up in the gaps between matches. A compiled Regex is immutable and may be
// used by many threads at once (each match gets its own match data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::tokenizer_detail {

class Regex {
 public:
  // Throws pagoda::Error naming the pattern and the PCRE2 message.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Byte ranges [begin, end) of the successive non-overlapping, non-empty
  // matches in s (leftmost-first, as Oniguruma / std::regex_search loops).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

  // A regex matching `literal` exactly.
  static std::string escape(std::string_view literal);

 private:
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so users need no pcre2.h
  std::string pattern_;
};

// What happens to the matched delimiters when a piece is split (HF names).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

enum class PrependScheme { always, first, never };

struct NormalizerStep {
  enum class Kind { prepend, replace };
  Kind kind = Kind::replace;
  std::string pattern;                 // replace: the literal to find (when !regex)
  std::shared_ptr<const Regex> regex;  // replace: the pattern (when set)
  std::string content;                 // prepend: the prefix; replace: the replacement
};

struct PreTokenizerStep {
  enum class Kind { split, byte_level, metaspace };
  Kind kind = Kind::split;
  // split (also byte_level's GPT-2 regex when use_regex):
  std::shared_ptr<const Regex> regex;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
  // byte_level:
  bool add_prefix_space = false;
  bool use_regex = true;
  // metaspace:
  std::string replacement = "\xE2\x96\x81";  // '▁'
  PrependScheme prepend_scheme = PrependScheme::always;
  bool split = true;
};

// The GPT-2 pre-tokenizer regex used by HF's ByteLevel(use_regex=true).
inline constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Applies the steps in order to one run of text. Prepend applies only to a
// non-empty run (HF).
std::string normalize(const std::vector<NormalizerStep>& steps, std::string text);

// Cuts one normalized run into words (each step re-splits every piece of the
// previous one). at_input_start: the run begins at offset 0 of the encoded
// text (Metaspace prepend_scheme "first"). Empty pieces are dropped.
std::vector<std::string> pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string text,
                                      bool at_input_start);

// Splits `piece` at the given matches (sorted, non-overlapping) per behavior;
// with invert the matches are the kept pieces and the gaps the delimiters.
void split_piece(std::string_view piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<std::string>& out);

// s with every occurrence of `from` replaced by `to` (from empty: s unchanged).
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

// GPT-2 byte-level alphabet: every byte maps to one printable code point
// (printable Latin-1 bytes to themselves, the rest to U+0100..U+0143).
std::string byte_level_encode(std::string_view bytes);
// Inverse; characters outside the alphabet are copied unchanged.
std::string byte_level_decode(std::string_view text);

}  // namespace pagoda::tokenizer_detail
