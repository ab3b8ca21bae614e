#include "cli/model_loading.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include <charconv>
#include <chrono>
#include <cstdio>

#include "common/error.h"
#include "hub/hub.h"
#include "vision/vision_encoder.h"

namespace pagoda::cli {

std::string weights_fingerprint(const std::string& path) {
  std::vector<std::string> files;
  if (std::filesystem::is_directory(path)) {
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && (name.ends_with(".gguf") || name.ends_with(".safetensors") || name == "config.json"))
        files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  return weights_fingerprint(files);
}

std::string weights_fingerprint(const std::vector<std::string>& files) {
  std::string msg;  // what is hashed: at most 2 MiB + a line per file
  std::vector<unsigned char> buf(1 << 20);
  for (const std::string& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) continue;
    const std::string meta = std::filesystem::path(f).filename().string() + ":" + std::to_string(st.st_size) + ":" +
                             std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
    msg += meta;
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const off_t size = st.st_size, chunk = static_cast<off_t>(buf.size());
    for (off_t at : {off_t{0}, std::max<off_t>(0, size - chunk)}) {
      const ssize_t n = ::pread(fd, buf.data(), buf.size(), at);
      if (n > 0) msg.append(reinterpret_cast<const char*>(buf.data()), static_cast<size_t>(n));
    }
    ::close(fd);
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), digest);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : digest) out += hex[b >> 4], out += hex[b & 15];
  return out;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

LoadedModel load_model(const std::string& path, bool require_tokenizer) {
  LoadOptions options;
  options.require_tokenizer = require_tokenizer;
  return load_model(path, options);
}

std::string resolve_model_path(const std::string& path) { return resolve_model(path, false).path; }

ResolvedModel resolve_model(const std::string& path, bool with_mmproj) {
  if (!hub::is_hub_uri(path)) return {path, ""};
  const hub::ModelRef ref = hub::ModelRef::parse(path);
  hub::PullOptions options;
  options.mmproj = with_mmproj;
  const hub::PullResult r = hub::pull(hub::HubConfig::from_env(), ref, options);
  // A split GGUF's first part: GgufFile::open maps the others.
  return {r.model_path.string(), r.mmproj_path.string()};
}

LoadedModel load_model(const std::string& requested_path, const LoadOptions& options) {
  const std::string path = resolve_model_path(requested_path);
  LoadedModel lm;
  double t0 = now_seconds();
  ModelConfig config;
  std::shared_ptr<const WeightSource> weights;
  if (is_model_directory(path)) {
    HfModelDir dir = HfModelDir::open(path);
    if (options.require_tokenizer) {
      if (dir.tokenizer_json.empty()) throw Error(path + ": has no tokenizer (tokenizer.json missing)");
      lm.tokenizer = Tokenizer::from_hf_json(dir.tokenizer_json, dir.tokenizer_config_json);
    }
    lm.chat_template = dir.chat_template;
    lm.generation = dir.generation;
    config = dir.config;
    weights = load_hf_weights(dir);
  } else {
    lm.file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
    if (options.require_tokenizer) {
      if (!lm.file->has("tokenizer.ggml.model"))
        throw Error(path + ": has no tokenizer (tokenizer.ggml.model missing)");
      lm.tokenizer = Tokenizer::from_gguf(*lm.file);
    }
    lm.chat_template = lm.file->get_string("tokenizer.chat_template").value_or("");
    if (options.quantize) {
      config = ModelConfig::from_gguf(*lm.file);
      weights = gguf_weight_source(lm.file);
    }
  }
  LoadProgress progress;
  const bool tty = isatty(STDERR_FILENO);
  if (tty) {
    progress.on_tensor = [](size_t done, size_t total) {
      if (done == total || done % 8 == 0)
        std::fprintf(stderr, "\rloading model: %zu/%zu tensors%s", done, total, done == total ? "\n" : "");
    };
  }
  if (options.quantize) weights = requantize(std::move(weights), *options.quantize);
  lm.model = weights ? Model::load(config, std::move(weights), progress) : Model::load(lm.file, progress);
  lm.load_seconds = now_seconds() - t0;
  return lm;
}

void add_quantize_option(CLI::App& app, std::string& value) {
  app.add_option("--quantize", value,
                 "Quantize the weight matrices at load time: q8_0, q4_0, q4_k, or any type convert --type takes");
}

std::optional<GgmlType> parse_quantize(const std::string& value) {
  if (value.empty()) return std::nullopt;
  return parse_weight_type(value, "--quantize");
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

LoadedModel load_draft_model(const std::string& path, const LoadedModel& target) {
  LoadedModel d = load_model(path, false);
  if (d.file && d.file->has("tokenizer.ggml.model") && !d.tokenizer) d.tokenizer = Tokenizer::from_gguf(*d.file);
  const int64_t nt = target.model->config().n_vocab, nd = d.model->config().n_vocab;
  if (nt != nd)
    throw Error("-md " + path + ": the draft model's vocabulary has " + std::to_string(nd) + " tokens, the model's " +
                std::to_string(nt) + ": a draft model must share the model's vocabulary");
  if (target.tokenizer && d.tokenizer) {
    const int32_t n = std::min(target.tokenizer->n_vocab(), d.tokenizer->n_vocab());
    if (target.tokenizer->n_vocab() != d.tokenizer->n_vocab())
      throw Error("-md " + path + ": the draft model's tokenizer has " + std::to_string(d.tokenizer->n_vocab()) +
                  " tokens, the model's " + std::to_string(target.tokenizer->n_vocab()));
    for (int32_t id = 0; id < n; ++id)
      if (target.tokenizer->token_to_piece(id) != d.tokenizer->token_to_piece(id))
        throw Error("-md " + path + ": token " + std::to_string(id) + " differs between the draft model's vocabulary and "
                    "the model's: a draft model must share the model's vocabulary");
  }
  return d;
}

// The projector of --mmproj, checked against the model it serves: the same embedding
// width, the model family it feeds, and for the projectors whose image tokens attend both
// ways (Gemma's) an image's tokens fit in one batch.
std::unique_ptr<VisionEncoder> load_vision_projector(const std::string& path, const Model& model,
                                                     int64_t max_batch_tokens) {
  auto enc = VisionEncoder::load(std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path)));
  const ModelConfig& mc = model.config();
  if (enc->config().text_dim != mc.dim)
    throw Error(path + ": the projector maps images to width " + std::to_string(enc->config().text_dim) +
                " but the model's embeddings are " + std::to_string(mc.dim) + " wide: it is another model's projector");
  const VisionProjector kind = enc->config().projector;
  const std::string feeds = kind == VisionProjector::Gemma4V ? "gemma4" : kind == VisionProjector::Qwen3VL ? "qwen35" : "gemma3";
  if (mc.arch_name != feeds && !(kind == VisionProjector::Qwen3VL && mc.arch_name == "qwen35moe"))
    throw Error(path + ": a " + enc->config().projector_name + " projector feeds " +
                (kind == VisionProjector::Qwen3VL ? std::string("qwen35 / qwen35moe") : feeds) + " models, not " +
                mc.arch_name);
  if (enc->uses_mrope() && mc.rope_sections.empty())
    throw Error(path + ": the projector places images by M-RoPE, and the model has no rope.dimension_sections");
  if (enc->bidirectional_image_tokens() && enc->tokens_per_image() > max_batch_tokens)
    throw Error("an image is up to " + std::to_string(enc->tokens_per_image()) + " tokens, more than --max-batch-tokens " +
                std::to_string(max_batch_tokens) + ": raise it (an image's tokens are computed in one batch)");
  return enc;
}

}  // namespace pagoda::cli
