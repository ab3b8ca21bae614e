// HubConfig::from_env and ModelRef parsing: the environment variables huggingface_hub reads
// (huggingface_hub/constants.py), with the same precedence.
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/ascii.h"
#include "common/error.h"
#include "hub/hub.h"

namespace pagoda::hub {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// huggingface_hub's _is_true: "1", "ON", "YES", "TRUE" (any case).
bool env_true(const char* name) {
  const std::string v = ascii_lower(env(name));
  return v == "1" || v == "on" || v == "yes" || v == "true";
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

bool valid_name_part(std::string_view s) {
  if (s.empty() || s.size() > 96 || s == "." || s == "..") return false;
  if (s.find("--") != std::string_view::npos || s.find("..") != std::string_view::npos) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

HubConfig HubConfig::from_env() {
  HubConfig c;
  std::string endpoint = env("HF_ENDPOINT");
  if (!endpoint.empty()) {
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    c.endpoint = endpoint;
  }
  std::string home = env("HOME");
  std::string xdg = env("XDG_CACHE_HOME");
  std::filesystem::path hf_home = env("HF_HOME");
  if (hf_home.empty())
    hf_home = std::filesystem::path(xdg.empty() ? home + "/.cache" : xdg) / "huggingface";
  std::string cache = env("HF_HUB_CACHE");
  if (cache.empty()) cache = env("HUGGINGFACE_HUB_CACHE");
  c.cache_dir = cache.empty() ? hf_home / "hub" : std::filesystem::path(cache);

  c.token = env("HF_TOKEN");
  if (c.token.empty()) c.token = env("HUGGING_FACE_HUB_TOKEN");
  if (c.token.empty()) {
    std::string token_path = env("HF_TOKEN_PATH");
    std::ifstream in(token_path.empty() ? (hf_home / "token").string() : token_path);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      c.token = trim(ss.str());
    }
  }
  c.offline = env_true("HF_HUB_OFFLINE");
  c.ca_bundle_file = env("REQUESTS_CA_BUNDLE");
  if (c.ca_bundle_file.empty()) c.ca_bundle_file = env("CURL_CA_BUNDLE");
  std::string timeout = env("HF_HUB_DOWNLOAD_TIMEOUT");
  if (!timeout.empty()) {
    char* end = nullptr;
    double seconds = std::strtod(timeout.c_str(), &end);
    if (end == timeout.c_str() || *end != '\0' || !(seconds > 0))
      throw Error("HF_HUB_DOWNLOAD_TIMEOUT='" + timeout + "': expected a positive number of seconds");
    c.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  c.progress = env_true("HF_HUB_DISABLE_PROGRESS_BARS") ? nullptr : stderr;
  c.progress_is_terminal = isatty(STDERR_FILENO);
  return c;
}

namespace {

// Why `revision` is not a ref name git would accept (see check_revision), or "" when it is.
std::string revision_problem(std::string_view rev) {
  if (rev.empty()) return "it is empty";
  if (rev.front() == '/' || rev.back() == '/') return "it starts or ends with '/'";
  if (rev.front() == '-') return "it starts with '-'";
  if (rev.back() == '.') return "it ends with '.'";
  if (rev == "@") return "it is '@'";
  for (const char* bad : {"..", "//", "@{"})
    if (rev.find(bad) != std::string_view::npos) return std::string("it contains '") + bad + "'";
  for (char c : rev) {
    if (static_cast<unsigned char>(c) < ' ' || c == 0x7f) return "it contains a control character";
    if (std::string_view(" ~^:?*[\\").find(c) != std::string_view::npos)
      return std::string("it contains '") + c + "'";
  }
  for (size_t start = 0; start < rev.size();) {
    size_t end = rev.find('/', start);
    if (end == std::string_view::npos) end = rev.size();
    const std::string_view part = rev.substr(start, end - start);
    if (part.front() == '.') return "a part starts with '.'";
    if (part.ends_with(".lock")) return "a part ends with '.lock'";
    if (part.size() > 255) return "a part is longer than 255 bytes";
    start = end + 1;
  }
  return "";
}

}  // namespace

void check_revision(std::string_view revision) {
  const std::string why = revision_problem(revision);
  if (why.empty()) return;
  std::string shown(revision.substr(0, 100));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < ' ' || c == 0x7f) c = '?';
  throw Error("bad revision '" + shown + "': " + why + " (expected a branch or tag name, or a 40-hex commit)");
}

bool is_hub_uri(std::string_view text) { return text.substr(0, 5) == "hf://"; }

ModelRef ModelRef::parse(std::string_view text) {
  const std::string original(text);
  if (is_hub_uri(text)) text.remove_prefix(5);
  auto bad = [&](const std::string& why) {
    return Error("bad model name '" + original + "': " + why +
                 " (expected OWNER/REPO, OWNER/REPO:QUANT or OWNER/REPO/FILE)");
  };
  ModelRef ref;
  const size_t slash1 = text.find('/');
  if (slash1 == std::string_view::npos) throw bad("no owner");
  const size_t slash2 = text.find('/', slash1 + 1);
  std::string_view owner = text.substr(0, slash1);
  std::string_view repo = text.substr(slash1 + 1, slash2 == std::string_view::npos ? text.npos : slash2 - slash1 - 1);
  if (slash2 == std::string_view::npos) {
    const size_t colon = repo.find(':');
    if (colon != std::string_view::npos) {
      ref.quant = std::string(repo.substr(colon + 1));
      repo = repo.substr(0, colon);
      if (ref.quant.empty()) throw bad("empty quant after ':'");
      for (char c : ref.quant)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
          throw bad("quant '" + ref.quant + "' has characters other than letters, digits, '_', '-', '.'");
    }
  } else {
    ref.file = std::string(text.substr(slash2 + 1));
    if (ref.file.empty()) throw bad("empty file path");
    std::string_view rest = ref.file;
    while (!rest.empty()) {
      const size_t s = rest.find('/');
      std::string_view part = rest.substr(0, s);
      if (part.empty() || part == "." || part == "..") throw bad("file path with an empty, '.' or '..' part");
      rest = s == std::string_view::npos ? std::string_view() : rest.substr(s + 1);
    }
    for (char c : ref.file)
      if (static_cast<unsigned char>(c) < ' ' || c == '\\') throw bad("control character or '\\' in the file path");
  }
  if (!valid_name_part(owner)) throw bad("owner '" + std::string(owner) + "' is not a valid Hub name");
  if (!valid_name_part(repo)) throw bad("repo '" + std::string(repo) + "' is not a valid Hub name");
  ref.repo_id = std::string(owner) + "/" + std::string(repo);
  return ref;
}

std::string ModelRef::to_string() const {
  if (!file.empty()) return repo_id + "/" + file;
  if (!quant.empty()) return repo_id + ":" + quant;
  return repo_id;
}

}  // namespace pagoda::hub
