#include "loadgen/sse.h"

#include <nlohmann/json.hpp>

#include "common/json_parse.h"

namespace pagoda::loadgen {

void SseParser::feed(std::string_view bytes, std::vector<std::string>& out_events) {
  for (char c : bytes) {
    if (failed_) return;
    if (c == '\n' && last_was_cr_) {  // the "\n" of a "\r\n" split or not
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = (c == '\r');
    if (c == '\n' || c == '\r') {
      end_line(out_events);
      continue;
    }
    line_.push_back(c);
    if (line_.size() + data_.size() > kMaxEventBytes) failed_ = true;
  }
}

void SseParser::end_line(std::vector<std::string>& out_events) {
  if (line_.empty()) {  // blank line: dispatch
    if (have_data_) out_events.push_back(std::move(data_));
    data_.clear();
    have_data_ = false;
    return;
  }
  if (line_[0] == ':') {  // comment
    line_.clear();
    return;
  }
  std::string_view line(line_);
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (have_data_) data_.push_back('\n');
    data_.append(value);
    have_data_ = true;
  }
  line_.clear();
}

StreamAccumulator::Status StreamAccumulator::on_event(std::string_view data, bool* content_chunk) {
  *content_chunk = false;
  if (done_) return Status::kDone;
  if (data == "[DONE]") {
    done_ = true;
    return Status::kDone;
  }
  nlohmann::json j = parse_json_or_discarded(data);
  if (j.is_discarded() || !j.is_object()) {
    detail_ = "event data is not a JSON object: " + std::string(data.substr(0, 80));
    return Status::kMalformed;
  }
  if (j.contains("error")) {
    const auto& e = j["error"];
    detail_ = e.is_object() && e.contains("message") && e["message"].is_string()
                  ? e["message"].get<std::string>()
                  : e.dump();
    return Status::kServerError;
  }
  bool has_choices = j.contains("choices") && j["choices"].is_array();
  bool has_usage = j.contains("usage") && j["usage"].is_object();
  if (!has_choices && !has_usage) {
    detail_ = "chunk has neither choices nor usage: " + std::string(data.substr(0, 80));
    return Status::kMalformed;
  }
  if (has_choices && !j["choices"].empty()) {
    const auto& c = j["choices"][0];
    if (!c.is_object()) {
      detail_ = "choices[0] is not an object";
      return Status::kMalformed;
    }
    const nlohmann::json* content = nullptr;
    if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content")) {
      content = &c["delta"]["content"];
    } else if (c.contains("text")) {
      content = &c["text"];
    }
    if (content && content->is_string() && !content->get_ref<const std::string&>().empty()) {
      text_ += content->get_ref<const std::string&>();
      ++num_content_chunks_;
      *content_chunk = true;
    }
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
      finish_reason_ = c["finish_reason"].get<std::string>();
    }
  }
  if (has_usage) {
    const auto& u = j["usage"];
    auto get = [&](const nlohmann::json& o, const char* key) -> int64_t {
      return o.contains(key) && o[key].is_number_integer() ? o[key].get<int64_t>() : 0;
    };
    has_usage_ = true;
    prompt_tokens_ = get(u, "prompt_tokens");
    completion_tokens_ = get(u, "completion_tokens");
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object() &&
        u["prompt_tokens_details"].contains("cached_tokens") &&
        u["prompt_tokens_details"]["cached_tokens"].is_number_integer()) {
      cached_tokens_ = u["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    }
  }
  return Status::kContinue;
}

}  // namespace pagoda::loadgen
