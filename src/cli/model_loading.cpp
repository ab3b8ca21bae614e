#include "cli/model_loading.h"

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>

#include "common/error.h"

namespace pagoda::cli {

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

LoadedModel load_model(const std::string& path, bool require_tokenizer) {
  LoadedModel lm;
  double t0 = now_seconds();
  lm.file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
  if (require_tokenizer) {
    if (!lm.file->has("tokenizer.ggml.model"))
      throw Error(path + ": has no tokenizer (tokenizer.ggml.model missing)");
    lm.tokenizer = Tokenizer::from_gguf(*lm.file);
  }
  LoadProgress progress;
  const bool tty = isatty(STDERR_FILENO);
  if (tty) {
    progress.on_tensor = [](size_t done, size_t total) {
      if (done == total || done % 8 == 0)
        std::fprintf(stderr, "\rloading model: %zu/%zu tensors%s", done, total, done == total ? "\n" : "");
    };
  }
  lm.model = Model::load(lm.file, progress);
  lm.load_seconds = now_seconds() - t0;
  return lm;
}

std::vector<int32_t> parse_token_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ',' || text[i] == ' ')) ++i;
    if (i >= text.size()) break;
    size_t j = i;
    if (text[j] == '-') ++j;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
    if (j == i || (j < text.size() && text[j] != ',' && text[j] != ' '))
      throw Error("invalid token list '" + text + "': expected integers separated by commas or spaces");
    int32_t v = 0;
    const auto [end, ec] = std::from_chars(text.data() + i, text.data() + j, v);
    if (ec != std::errc() || end != text.data() + j)
      throw Error("token id " + text.substr(i, j - i) + " is out of range");
    ids.push_back(v);
    i = j;
  }
  return ids;
}

}  // namespace pagoda::cli
