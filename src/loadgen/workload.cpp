#include "loadgen/workload.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace pagoda::loadgen {

namespace {

// 200 common English words, lower case, each a single token or two in
// Llama-family vocabularies. Fixed forever: changing it changes every workload.
constexpr const char* kWords[] = {
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are",
    "as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by",
    "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there",
    "use", "an", "each", "which", "she", "do", "how", "their", "if", "will", "up", "other",
    "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make",
    "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number",
    "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who",
    "oil", "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may",
    "part", "over", "new", "sound", "take", "only", "little", "work", "know", "place", "year",
    "live", "me", "back", "give", "most", "very", "after", "thing", "our", "just", "name",
    "good", "sentence", "man", "think", "say", "great", "where", "help", "through", "much",
    "before", "line", "right", "too", "mean", "old", "any", "same", "tell", "boy", "follow",
    "came", "want", "show", "also", "around", "form", "three", "small", "set", "put", "end",
    "does", "another", "well", "large", "must", "big", "even", "such", "because", "turn",
    "here", "why", "ask", "went", "men", "read", "need", "land", "different", "home", "us",
    "move", "try", "kind", "hand", "picture", "again", "change", "off", "play", "spell", "air",
    "away", "animal", "house", "point", "page", "letter", "mother", "answer", "found", "study",
    "still", "learn", "should", "world", "high", "every", "near", "add", "food", "between",
    "own", "below", "country", "plant", "last", "school", "father", "keep", "tree", "never",
    "start", "city", "earth", "eye", "light", "thought", "head", "under", "story"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);
constexpr double kWordsPerToken = 0.75;

uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a ^ (b * 0x9E3779B97F4A7C15ull));
  r.next();
  return r.next();
}

int64_t words_for_tokens(int64_t tokens) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(static_cast<double>(tokens) * kWordsPerToken)));
}

struct Text {
  std::string text;
  int64_t tokens = 0;
};

// A text of `target` tokens: words drawn from `rng`; with a counter, adjusted word
// by word to the exact count (or the closest reachable in 64 steps).
Text make_text(Rng& rng, int64_t target, const TokenCounter& counter) {
  std::vector<const char*> words;
  auto add_words = [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) words.push_back(kWords[rng.below(kNumWords)]);
  };
  auto join = [&] {
    std::string s;
    for (size_t i = 0; i < words.size(); ++i) {
      if (i) s.push_back(' ');
      s += words[i];
    }
    return s;
  };
  add_words(words_for_tokens(target));
  Text out;
  out.text = join();
  if (!counter) {
    out.tokens = approx_tokens(out.text);
    return out;
  }
  out.tokens = counter(out.text);
  for (int step = 0; step < 64 && out.tokens != target; ++step) {
    int64_t diff = target - out.tokens;
    int64_t n = std::max<int64_t>(1, static_cast<int64_t>(std::abs(diff) * kWordsPerToken / 2));
    if (diff > 0) {
      add_words(n);
    } else {
      n = std::min<int64_t>(n, static_cast<int64_t>(words.size()) - 1);
      if (n <= 0) break;
      words.resize(words.size() - static_cast<size_t>(n));
    }
    out.text = join();
    out.tokens = counter(out.text);
  }
  return out;
}

}  // namespace

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::exponential(double rate) { return -std::log1p(-uniform01()) / rate; }

std::string workload_name(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kRandom: return "random";
    case WorkloadKind::kSharedPrefix: return "shared-prefix";
    case WorkloadKind::kMultiTurn: return "multi-turn";
    case WorkloadKind::kRepeat: return "repeat";
  }
  return "?";
}

bool parse_workload(std::string_view name, WorkloadKind* out) {
  for (WorkloadKind k : {WorkloadKind::kRandom, WorkloadKind::kSharedPrefix, WorkloadKind::kMultiTurn, WorkloadKind::kRepeat}) {
    if (name == workload_name(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

std::string endpoint_name(Endpoint e) { return e == Endpoint::kChat ? "chat" : "completions"; }

bool parse_endpoint(std::string_view name, Endpoint* out) {
  if (name == "chat") {
    *out = Endpoint::kChat;
  } else if (name == "completions") {
    *out = Endpoint::kCompletions;
  } else {
    return false;
  }
  return true;
}

std::string endpoint_path(Endpoint e) {
  return e == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
}

int64_t approx_tokens(std::string_view text) {
  int64_t words = 0;
  bool in_word = false;
  for (char c : text) {
    bool space = c == ' ' || c == '\n' || c == '\t';
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return static_cast<int64_t>(std::ceil(static_cast<double>(words) / kWordsPerToken));
}

Workload::Workload(const WorkloadOptions& options, TokenCounter counter)
    : options_(options), counter_(std::move(counter)) {
  PAGODA_CHECK(options.input_len >= 1 && options.output_len >= 1 && options.prefix_len >= 1 &&
                   options.turns >= 1,
               "workload lengths and turns must be >= 1");
  if (options_.kind == WorkloadKind::kSharedPrefix) {
    Rng rng(mix(options_.seed, ~0ull));
    Text t = make_text(rng, options_.prefix_len, counter_);
    shared_prefix_ = std::move(t.text);
    shared_prefix_tokens_ = t.tokens;
  }
}

int Workload::turns_per_job() const {
  const bool turns = options_.kind == WorkloadKind::kMultiTurn || options_.kind == WorkloadKind::kRepeat;
  return turns ? static_cast<int>(options_.turns) : 1;
}

Job Workload::job(int64_t job_idx) const {
  Job job;
  job.job_idx = job_idx;
  Rng rng(mix(options_.seed, static_cast<uint64_t>(job_idx)));
  int64_t len = options_.input_len;
  if (options_.kind == WorkloadKind::kRandom) {
    int64_t lo = std::max<int64_t>(1, static_cast<int64_t>(std::llround(0.8 * static_cast<double>(len))));
    int64_t hi = std::max<int64_t>(lo, static_cast<int64_t>(std::llround(1.2 * static_cast<double>(len))));
    len = lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo + 1)));
  }
  if (options_.kind == WorkloadKind::kSharedPrefix) {
    job.system = shared_prefix_;
    job.system_tokens = shared_prefix_tokens_;
  } else if (options_.kind == WorkloadKind::kMultiTurn && options_.system_len > 0) {
    Text text = make_text(rng, options_.system_len, counter_);
    job.system = std::move(text.text);
    job.system_tokens = text.tokens;
  }
  job.standalone = options_.kind == WorkloadKind::kRepeat;
  for (int t = 0; t < turns_per_job(); ++t) {
    if (job.standalone && t > 0) {  // the same message again
      job.user.push_back(job.user[0]);
      job.user_tokens.push_back(job.user_tokens[0]);
      continue;
    }
    Text text = make_text(rng, len, counter_);
    job.user.push_back(std::move(text.text));
    job.user_tokens.push_back(text.tokens);
  }
  return job;
}

std::string request_body(Endpoint endpoint, const std::string& model, const Job& job, int turn_idx,
                         const std::vector<std::string>& answers, int64_t output_len, bool fixed_output,
                         const std::string& extra_body) {
  PAGODA_CHECK(turn_idx >= 0 && turn_idx < static_cast<int>(job.user.size()), "turn index out of range");
  PAGODA_CHECK(answers.size() >= static_cast<size_t>(turn_idx), "missing answers to earlier turns");
  nlohmann::ordered_json body;
  if (!model.empty()) body["model"] = model;
  if (endpoint == Endpoint::kChat) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!job.system.empty()) messages.push_back({{"role", "system"}, {"content", job.system}});
    for (int t = job.standalone ? turn_idx : 0; t <= turn_idx; ++t) {
      messages.push_back({{"role", "user"}, {"content", job.user[static_cast<size_t>(t)]}});
      if (t < turn_idx) {
        messages.push_back({{"role", "assistant"}, {"content", answers[static_cast<size_t>(t)]}});
      }
    }
    body["messages"] = std::move(messages);
  } else {
    std::string prompt;
    if (!job.system.empty()) prompt += job.system + "\n\n";
    for (int t = job.standalone ? turn_idx : 0; t <= turn_idx; ++t) {
      prompt += "User: " + job.user[static_cast<size_t>(t)] + "\nAssistant:";
      if (t < turn_idx) prompt += answers[static_cast<size_t>(t)] + "\n";
    }
    body["prompt"] = std::move(prompt);
  }
  if (job.standalone) body["temperature"] = 0;
  body["max_tokens"] = output_len;
  if (fixed_output) {
    body["min_tokens"] = output_len;
    body["ignore_eos"] = true;
  }
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (!extra_body.empty()) {
    const nlohmann::ordered_json extra = nlohmann::ordered_json::parse(extra_body);
    for (const auto& [key, value] : extra.items()) body[key] = value;
  }
  return body.dump();
}

void check_extra_body(const std::string& extra_body) {
  if (extra_body.empty()) return;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(extra_body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error("--extra-body: not a JSON object: " + extra_body);
  for (const char* reserved : {"stream", "stream_options", "messages", "prompt"})
    if (j.contains(reserved))
      throw Error(std::string("--extra-body may not set '") + reserved + "': the client reads the answer by it");
}

}  // namespace pagoda::loadgen
