#include "server/answer_tokens.h"

#include "common/json_text.h"
#include "common/utf8.h"

namespace pagoda {

void AnswerTokens::remember(const Tokenizer& tok, const std::string& text, std::span<const int32_t> ids) {
  if (capacity_bytes_ == 0 || text.empty() || ids.empty()) return;
  // The text must be theirs: not cut by a stop string, nothing split off. A sampled
  // partial UTF-8 character reached the client as U+FFFD, so the sanitized decode counts
  // too (the ids are then what the model really saw; the text is a lossy copy).
  const std::string decoded = tok.decode(ids);
  if (decoded != text && sanitize_utf8(decoded) != text) return;
  // Keyed by what the client received and will send back: the JSON writer's text, with
  // any invalid UTF-8 (a sampled partial character) turned into U+FFFD.
  Entry e{nlohmann::json::parse(dump_json(nlohmann::json(text))).get<std::string>(),
          std::vector<int32_t>(ids.begin(), ids.end())};
  if (e.bytes() > capacity_bytes_) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (const auto it = by_text_.find(e.text); it != by_text_.end()) {  // the same answer again
    lru_.splice(lru_.end(), lru_, it->second);
    return;
  }
  while (bytes_ + e.bytes() > capacity_bytes_ && !lru_.empty()) {
    by_text_.erase(lru_.front().text);
    bytes_ -= lru_.front().bytes();
    lru_.pop_front();
  }
  bytes_ += e.bytes();
  lru_.push_back(std::move(e));
  by_text_.emplace(lru_.back().text, std::prev(lru_.end()));
  ++remembered_;
}

std::vector<int32_t> AnswerTokens::find(const std::string& text) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto it = by_text_.find(text);
  if (it == by_text_.end()) return {};
  lru_.splice(lru_.end(), lru_, it->second);
  return it->second->ids;
}

AnswerTokensStats AnswerTokens::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {static_cast<int64_t>(lru_.size()), bytes_, capacity_bytes_, remembered_, spliced_};
}

std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, const std::string& text, bool add_bos) {
  std::vector<int32_t> ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
  if (add_bos && tok.add_bos() && tok.bos() >= 0 && (ids.empty() || ids.front() != tok.bos())) ids.insert(ids.begin(), tok.bos());
  return ids;
}

std::vector<int32_t> tokenize_chat(const Tokenizer& tok, const std::string& rendered,
                                   const nlohmann::ordered_json& messages, AnswerTokens* answers, bool add_bos) {
  if (!answers || !messages.is_array()) return tokenize_prompt(tok, rendered, add_bos);
  std::vector<int32_t> ids;
  size_t text_from = 0;  // rendered[text_from, ...) is not tokenized yet
  int64_t spliced = 0;
  for (const auto& m : messages) {
    if (!m.is_object() || m.value("role", "") != "assistant") continue;
    const auto c = m.find("content");
    if (c == m.end() || !c->is_string() || c->get_ref<const std::string&>().empty()) continue;
    const std::string& content = c->get_ref<const std::string&>();
    const size_t at = rendered.find(content, text_from);
    if (at == std::string::npos) continue;
    const size_t after = at + content.size();
    if (after < rendered.size()) {
      // Only where the turn closes with a special token: then the text after starts a
      // new run and tokenizes as it would in the whole prompt. 64 bytes hold any.
      const std::vector<int32_t> next =
          tok.encode(std::string_view(rendered).substr(after, 64), /*add_special=*/false, /*parse_special=*/true);
      if (next.empty() || !tok.is_special(next.front())) continue;
    }
    std::vector<int32_t> answer = answers->find(content);
    if (answer.empty()) continue;
    const std::string before = rendered.substr(text_from, at - text_from);
    if (text_from == 0) {
      ids = tokenize_prompt(tok, before, add_bos);
    } else {
      const std::vector<int32_t> piece = tok.encode(before, /*add_special=*/false, /*parse_special=*/true);
      ids.insert(ids.end(), piece.begin(), piece.end());
    }
    ids.insert(ids.end(), answer.begin(), answer.end());
    text_from = after;
    ++spliced;
  }
  if (spliced == 0) return tokenize_prompt(tok, rendered, add_bos);
  const std::vector<int32_t> rest =
      tok.encode(std::string_view(rendered).substr(text_from), /*add_special=*/false, /*parse_special=*/true);
  ids.insert(ids.end(), rest.begin(), rest.end());
  std::lock_guard<std::mutex> lk(answers->mu_);
  answers->spliced_ += spliced;
  return ids;
}

}  // namespace pagoda
