// BPE by merge rank, as HF tokenizers' Word::merge_all does it: start from one
// symbol per UTF-8 character (characters outside the vocabulary become <0xNN>
// byte tokens with byte_fallback, else <unk>, fused when fuse_unk), then
// repeatedly apply the lowest-rank merge among adjacent pairs (ties: leftmost).
//
// Merges work on token ids: the table maps (left id, right id) to (rank, result
// id), so a step costs one hash lookup and no string building. Queue entries
// may go stale when a neighbour merges first; an entry is applied only if the
// pair at its position still has the merge of the same rank (a rank names one
// merge, so that check is exact).
#include <algorithm>
#include <queue>
#include <vector>

#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace pagoda::tokenizer_detail {

namespace {

struct Symbol {
  TokenId id;
  int prev;
  int next;
  bool alive;
};

struct Candidate {
  int32_t rank;
  int pos;  // index of the left symbol
};

struct CandidateOrder {
  // priority_queue pops the "largest": lowest rank first, then leftmost.
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
  }
};

}  // namespace

void bpe_tokenize(const Vocab& vocab, std::string_view word, std::vector<TokenId>& out) {
  if (word.empty()) return;
  if (vocab.ignore_merges || (vocab.newline_words_whole && word.find_first_not_of('\n') == std::string_view::npos)) {
    if (auto id = vocab.find_model_token(word)) {
      out.push_back(*id);
      return;
    }
  }

  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto push = [&](TokenId id) {
    const int idx = static_cast<int>(symbols.size());
    symbols.push_back({id, idx - 1, idx + 1, true});
  };
  bool prev_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t len = utf8_char_len(word, i);
    const std::string_view ch = word.substr(i, len);
    i += len;
    if (auto id = vocab.find_model_token(ch)) {
      push(*id);
      prev_unk = false;
      continue;
    }
    if (vocab.byte_fallback &&
        std::all_of(ch.begin(), ch.end(),
                    [&](char c) { return vocab.byte_tokens[static_cast<uint8_t>(c)] >= 0; })) {
      for (char c : ch) push(vocab.byte_tokens[static_cast<uint8_t>(c)]);
      prev_unk = false;
      continue;
    }
    // HF drops the character when the model has no unk token.
    if (vocab.unk < 0) continue;
    if (!(vocab.fuse_unk && prev_unk)) push(vocab.unk);
    prev_unk = true;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  auto rule_at = [&](int pos) -> const MergeRule* {
    if (pos < 0 || !symbols[pos].alive || symbols[pos].next < 0) return nullptr;
    return vocab.merges.find(merge_key(symbols[pos].id, symbols[symbols[pos].next].id));
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) {
    if (const MergeRule* r = rule_at(i)) queue.push({r->rank, i});
  }

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const MergeRule* rule = rule_at(c.pos);
    if (rule == nullptr || rule->rank != c.rank) continue;
    Symbol& left = symbols[c.pos];
    Symbol& right = symbols[left.next];
    left.id = rule->result;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = c.pos;
    if (const MergeRule* r = rule_at(left.prev)) queue.push({r->rank, left.prev});
    if (const MergeRule* r = rule_at(c.pos)) queue.push({r->rank, c.pos});
  }

  for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace pagoda::tokenizer_detail
