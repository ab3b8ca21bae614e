#include "tokenizer/hf_json.h"

#include <string_view>

#include "common/error.h"
#include "common/mapped_file.h"

namespace pagoda::tokenizer_detail {

namespace {

using json = nlohmann::json;

// A SAX handler that builds the DOM the way nlohmann's own DOM parser does
// (a stack of open containers; `slot_` is where an object's next value goes),
// except that the values of root.model.vocab and root.model.merges are
// diverted into TokenizerJson's vectors.
class Reader final : public nlohmann::json_sax<json> {
 public:
  explicit Reader(TokenizerJson& out) : out_(out) {}

  const std::string& error() const { return error_; }

  bool null() override { return value(nullptr); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::vocab) return vocab_entry(v);
    return value(v);
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::vocab) {
      return vocab_entry(v > static_cast<number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
    }
    return value(v);
  }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool string(string_t& v) override {
    if (mode_ == Mode::merges) return merge_string(v);
    return value(std::move(v));
  }
  bool binary(binary_t&) override { return fail("unexpected binary value"); }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::dom) return fail(where() + " must not contain objects");
    if (is_model_member("vocab")) {
      mode_ = Mode::vocab;
      out_.has_vocab = true;
      return true;
    }
    json* j = add(json::object());
    if (j == nullptr) return false;
    if (stack_.size() == 1 && key_ == "model") model_ = j;
    stack_.push_back(j);
    return true;
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::vocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    if (mode_ != Mode::dom) return fail(where() + " must not contain objects");
    key_ = k;
    slot_ = &(*stack_.back())[k];
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::vocab) {
      mode_ = Mode::dom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::merges) {
      if (merge_depth_ != 0) return fail("model.merges: entry " + std::to_string(out_.merges.size()) +
                                         " is nested too deeply");
      merge_depth_ = 1;
      pair_.clear();
      return true;
    }
    if (mode_ == Mode::vocab) return fail("model.vocab: ids must be integers");
    if (is_model_member("merges")) {
      mode_ = Mode::merges;
      merge_depth_ = 0;
      out_.has_merges = true;
      return true;
    }
    json* j = add(json::array());
    if (j == nullptr) return false;
    stack_.push_back(j);
    return true;
  }
  bool end_array() override {
    if (mode_ == Mode::merges) {
      if (merge_depth_ == 0) {
        mode_ = Mode::dom;
        return true;
      }
      merge_depth_ = 0;
      if (pair_.size() != 2) {
        return fail("model.merges: entry " + std::to_string(out_.merges.size()) + " has " +
                    std::to_string(pair_.size()) + " parts, expected [left, right]");
      }
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    return fail(std::string("invalid JSON: ") + ex.what());
  }

 private:
  enum class Mode { dom, vocab, merges };

  bool fail(std::string msg) {
    if (error_.empty()) error_ = std::move(msg);
    return false;
  }

  std::string where() const {
    return mode_ == Mode::vocab ? "model.vocab" : mode_ == Mode::merges ? "model.merges" : "JSON";
  }

  // True when the container about to open is root.model.<name>.
  bool is_model_member(const char* name) const {
    return model_ != nullptr && !stack_.empty() && stack_.back() == model_ && key_ == name;
  }

  json* add(json&& v) {
    if (stack_.empty()) {
      out_.doc = std::move(v);
      return &out_.doc;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  template <class T>
  bool value(T&& v) {
    if (mode_ == Mode::vocab) return fail("model.vocab: the id of '" + vocab_key_ + "' is not an integer");
    if (mode_ == Mode::merges) {
      return fail("model.merges: entry " + std::to_string(out_.merges.size()) +
                  " is not a string or a [left, right] pair");
    }
    return add(json(std::forward<T>(v))) != nullptr;
  }

  bool vocab_entry(int64_t id) {
    out_.vocab.emplace_back(std::move(vocab_key_), id);
    return true;
  }

  bool merge_string(std::string& s) {
    if (merge_depth_ == 1) {
      pair_.push_back(std::move(s));
      return true;
    }
    // "left right": exactly one separating space, as HF requires.
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos) {
      return fail("model.merges: entry " + std::to_string(out_.merges.size()) + " '" + s +
                  "' is not of the form 'left right'");
    }
    out_.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    return true;
  }

  TokenizerJson& out_;
  std::vector<json*> stack_;
  json* slot_ = nullptr;
  json* model_ = nullptr;
  std::string key_;
  Mode mode_ = Mode::dom;
  std::string vocab_key_;
  int merge_depth_ = 0;
  std::vector<std::string> pair_;
  std::string error_;
};

}  // namespace

TokenizerJson read_tokenizer_json(const std::string& path) {
  MappedFile file(path);
  TokenizerJson out;
  Reader reader(out);
  const auto* begin = reinterpret_cast<const char*>(file.data());
  const bool ok = json::sax_parse(begin, begin + file.size(), &reader);
  if (!ok) {
    throw Error(path + ": " + (reader.error().empty() ? std::string("invalid JSON") : reader.error()));
  }
  return out;
}

}  // namespace pagoda::tokenizer_detail
