// Tokenizer: the encode pipeline shared by both loaders, decoding, and
// Vocab::finalize(). Encoding one text:
//   1. cut it at added tokens (leftmost-longest; special ones only with
//      parse_special) — the pieces in between are "runs";
//   2. normalize each run (SPM: ' ' -> '▁' and a leading '▁');
//   3. pre-tokenize the run into words (byte-level BPE: regex split + byte map);
//   4. run the model (SPM score merges / BPE rank merges) on each word.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "common/error.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace pagoda {

namespace tokenizer_detail {

namespace {

// End-of-turn tokens by name, in order of preference (llama.cpp's list), used
// when the file names no EOT id. The EOG names add the other stop tokens.
constexpr std::string_view kEotNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",   "<end_of_turn>", "<|endoftext|>",
    "<EOT>",      "_<EOT>",     "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<end_of_utterance>", "<turn|>"};
// Gemma 4 also stops after a call, where the template writes "<|tool_response>" (llama.cpp).
constexpr std::string_view kExtraEogNames[] = {"<|eom_id|>", "<|end_of_text|>", "<|return|>",
                                               "<|call|>", "<|tool_response>"};

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

void Vocab::finalize() {
  const int32_t n = n_vocab();
  if (n <= 0) throw Error(source + ": the vocabulary is empty");
  if (text_index.empty()) build_text_index();
  if (std::all_of(byte_tokens.begin(), byte_tokens.end(), [](TokenId t) { return t < 0; })) {
    for (int32_t id = 0; id < n; ++id) {
      if (tokens[id].kind != TokenKind::byte) continue;
      const int b = parse_byte_token(tokens[id].text);
      if (b >= 0) byte_tokens[b] = id;
    }
  }

  auto check_id = [&](TokenId id, const char* what) {
    if (id != -1 && !in_range(id)) {
      throw Error(source + ": " + what + " id " + std::to_string(id) + " is outside the vocabulary (" +
                  std::to_string(n) + " tokens)");
    }
  };
  check_id(bos, "BOS");
  check_id(eos, "EOS");
  check_id(unk, "unknown-token");
  check_id(pad, "padding");
  if (eot) check_id(*eot, "EOT");
  if (eom) check_id(*eom, "EOM");
  if (add_bos && bos < 0) throw Error(source + ": add_bos is set but there is no BOS token");
  if (add_eos && eos < 0) throw Error(source + ": add_eos is set but there is no EOS token");

  for (auto& bucket : added_by_first_byte) bucket.clear();
  for (uint32_t i = 0; i < added_tokens.size(); ++i) {
    const AddedToken& t = added_tokens[i];
    check_id(t.id, "added token");
    if (t.content.empty()) continue;
    added_by_first_byte[static_cast<uint8_t>(t.content[0])].push_back(i);
  }
  for (auto& bucket : added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](uint32_t a, uint32_t b) {
      return added_tokens[a].content.size() > added_tokens[b].content.size();
    });
  }

  // Stop tokens are looked up by name only among added/special tokens, so a
  // plain-text token that happens to read "<EOT>" never stops generation.
  auto special_named = [&](std::string_view name) -> std::optional<TokenId> {
    auto id = find(name);
    if (!id) return std::nullopt;
    const TokenKind k = tokens[*id].kind;
    if (k != TokenKind::control && k != TokenKind::user_defined) return std::nullopt;
    return id;
  };
  if (!eot) {
    for (std::string_view name : kEotNames) {
      if ((eot = special_named(name))) break;
    }
  }
  if (!eom) eom = special_named("<|eom_id|>");
  eog.clear();
  if (eos >= 0) eog.push_back(eos);
  if (eot) eog.push_back(*eot);
  if (eom) eog.push_back(*eom);
  for (std::string_view name : kEotNames) {
    if (auto id = special_named(name)) eog.push_back(*id);
  }
  for (std::string_view name : kExtraEogNames) {
    if (auto id = special_named(name)) eog.push_back(*id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
}

namespace {

// Normalizes, pre-tokenizes and runs the model on one run of plain text.
void encode_run(const Vocab& v, std::string_view run, bool at_input_start,
                std::vector<TokenId>& out) {
  std::string normalized = normalize(v.normalizers, std::string(run));
  auto model = v.algorithm == Algorithm::spm_scores ? spm_tokenize : bpe_tokenize;
  if (v.pre_tokenizers.empty()) {
    model(v, normalized, out);
    return;
  }
  for (const std::string& word : pre_tokenize(v.pre_tokenizers, std::move(normalized), at_input_start)) {
    model(v, word, out);
  }
}

// The added token matching at text[pos] (longest first), or nullptr.
const AddedToken* match_added(const Vocab& v, std::string_view text, size_t pos,
                              bool parse_special) {
  for (uint32_t idx : v.added_by_first_byte[static_cast<uint8_t>(text[pos])]) {
    const AddedToken& t = v.added_tokens[idx];
    if (t.special && !parse_special) continue;
    if (text.substr(pos).starts_with(t.content)) return &t;
  }
  return nullptr;
}

}  // namespace

}  // namespace tokenizer_detail

using tokenizer_detail::AddedToken;
using tokenizer_detail::Vocab;

Tokenizer::Tokenizer(std::unique_ptr<Vocab> vocab) : vocab_(std::move(vocab)) {}
Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const Vocab& v = vocab();
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && v.add_bos) out.push_back(v.bos);

  size_t run_begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* t = tokenizer_detail::match_added(v, text, pos, parse_special);
    if (t == nullptr) {
      ++pos;
      continue;
    }
    size_t run_end = pos;
    size_t next = pos + t->content.size();
    if (t->lstrip) {
      while (run_end > run_begin && tokenizer_detail::is_ascii_space(text[run_end - 1])) --run_end;
    }
    if (t->rstrip) {
      while (next < text.size() && tokenizer_detail::is_ascii_space(text[next])) ++next;
    }
    if (run_end > run_begin) {
      tokenizer_detail::encode_run(v, text.substr(run_begin, run_end - run_begin), run_begin == 0, out);
    }
    out.push_back(t->id);
    pos = run_begin = next;
  }
  if (text.size() > run_begin) {
    tokenizer_detail::encode_run(v, text.substr(run_begin), run_begin == 0, out);
  }

  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  const Vocab& v = vocab();
  PAGODA_CHECK(v.in_range(id), "token id " + std::to_string(id) + " outside [0, " +
                                   std::to_string(v.n_vocab()) + ")");
  if (!render_special && v.is_special(id)) return {};
  return v.tokens[id].piece;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  const Vocab& v = vocab();
  std::string out;
  bool at_start = true;
  for (TokenId id : ids) {
    if (!v.in_range(id)) {
      throw Error("decode: token id " + std::to_string(id) + " is outside [0, " +
                  std::to_string(v.n_vocab()) + ")");
    }
    if (skip_special && v.is_special(id)) continue;
    const std::string& piece = v.tokens[id].piece;
    if (at_start && id != v.bos && !piece.empty()) {
      at_start = false;
      if (v.strip_leading_space && piece[0] == ' ') {
        out.append(piece, 1, std::string::npos);
        continue;
      }
    }
    out += piece;
  }
  return out;
}

const std::string& Tokenizer::token_text(TokenId id) const {
  const Vocab& v = vocab();
  PAGODA_CHECK(v.in_range(id), "token id " + std::to_string(id) + " outside [0, " +
                                   std::to_string(v.n_vocab()) + ")");
  return v.tokens[id].text;
}

std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
  return vocab().find(text);
}

int32_t Tokenizer::n_vocab() const { return vocab().n_vocab(); }
TokenId Tokenizer::bos() const { return vocab().bos; }
TokenId Tokenizer::eos() const { return vocab().eos; }
std::optional<TokenId> Tokenizer::eot() const { return vocab().eot; }

bool Tokenizer::is_eog(TokenId id) const {
  const auto& eog = vocab().eog;
  return std::binary_search(eog.begin(), eog.end(), id);
}

bool Tokenizer::is_special(TokenId id) const {
  const Vocab& v = vocab();
  PAGODA_CHECK(v.in_range(id), "token id " + std::to_string(id) + " outside [0, " +
                                   std::to_string(v.n_vocab()) + ")");
  return v.is_special(id);
}

bool Tokenizer::add_bos() const { return vocab().add_bos; }
bool Tokenizer::add_eos() const { return vocab().add_eos; }
bool Tokenizer::strips_leading_space() const { return vocab().strip_leading_space; }
std::string Tokenizer::model_name() const { return vocab().model_name; }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, StreamDecoderOptions options)
    : tokenizer_(&tokenizer), options_(options), at_start_(options.at_text_start) {}

std::string StreamDecoder::push(TokenId id) {
  std::string piece = tokenizer_->token_to_piece(id, options_.render_special);
  // The same leading-space rule as Tokenizer::decode.
  if (at_start_ && id != tokenizer_->bos() && !piece.empty()) {
    at_start_ = false;
    if (tokenizer_->strips_leading_space() && piece[0] == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  std::string out;
  const size_t consumed = tokenizer_detail::sanitize_utf8(pending_, /*final=*/false, out);
  pending_.erase(0, consumed);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  tokenizer_detail::sanitize_utf8(pending_, /*final=*/true, out);
  pending_.clear();
  at_start_ = options_.at_text_start;
  return out;
}

}  // namespace pagoda
