// SentencePiece-style merging by score, as llama.cpp's llm_tokenizer_spm does
// it (that is what the ggml-vocab-llama-spm vectors pin): start from single
// UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is
// the best-scoring vocabulary token (ties: leftmost), then map each remaining
// symbol to its token or, failing that, to <0xNN> byte tokens.
//
// Two deliberate differences, neither touching valid text without "<0xNN>":
// - a pair may only merge into a normal or user-defined token, never into a
//   control/unknown/byte/unused one, as in SentencePiece itself (llama.cpp
//   would turn the literal text "<0x41>" into the byte token for 'A');
// - invalid UTF-8 is split with utf8_char_len (a stray lead byte is one
//   symbol), so it round-trips.
#include <algorithm>
#include <queue>
#include <vector>

#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace pagoda::tokenizer_detail {

namespace {

struct Symbol {
  int prev;
  int next;
  uint32_t begin;  // byte offset into the text
  uint32_t len;    // 0 once merged into its left neighbour
};

struct Bigram {
  float score;
  int left;
  int right;
  uint32_t len;  // len of left + right when queued; a mismatch later means stale
};

struct BigramOrder {
  // priority_queue pops the "largest": best score first, then leftmost.
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

bool mergeable(TokenKind k) { return k == TokenKind::normal || k == TokenKind::user_defined; }

}  // namespace

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8_char_len(text, i);
    const int idx = static_cast<int>(symbols.size());
    symbols.push_back({idx - 1, idx + 1, static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
    i += len;
  }
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const uint32_t len = symbols[left].len + symbols[right].len;
    auto id = vocab.find(text.substr(symbols[left].begin, len));
    if (!id || !mergeable(vocab.tokens[*id].kind)) return;
    queue.push({vocab.tokens[*id].score, left, right, len});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != b.len) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }

  for (int i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = text.substr(s.begin, s.len);
    auto id = vocab.find(piece);
    if (id && mergeable(vocab.tokens[*id].kind)) {
      out.push_back(*id);
      continue;
    }
    for (char c : piece) {
      const TokenId byte_id = vocab.byte_tokens[static_cast<uint8_t>(c)];
      if (byte_id >= 0) {
        out.push_back(byte_id);
      } else if (vocab.unk >= 0) {
        out.push_back(vocab.unk);
      }
    }
  }
}

}  // namespace pagoda::tokenizer_detail
