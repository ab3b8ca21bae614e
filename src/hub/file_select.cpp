#include "hub/file_select.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/ascii.h"
#include "common/error.h"
#include "common/json_parse.h"

namespace pagoda::hub {

namespace {

bool ends_with_ci(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && ascii_lower(s.substr(s.size() - suffix.size())) == suffix;
}

std::string basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// One loadable GGUF: a single file or all the parts of a split one.
struct GgufSet {
  std::string name;                 // path without ".gguf" / "-0000K-of-0000N.gguf"
  std::vector<std::string> files;   // part 1 first
  int expected_parts = 1;
};

// "dir/NAME-00002-of-00005.gguf" -> {"dir/NAME", 2, 5}; false when not a split part.
bool parse_split(const std::string& path, std::string* prefix, int* part, int* total) {
  // NAME-XXXXX-of-YYYYY.gguf: 5 + 4 + 5 + 5 characters of suffix.
  const size_t suffix_len = std::string_view("-00001-of-00005.gguf").size();
  if (path.size() <= suffix_len) return false;
  const std::string tail = ascii_lower(path.substr(path.size() - suffix_len));
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || tail.substr(15) != ".gguf") return false;
  const std::string a = tail.substr(1, 5), b = tail.substr(10, 5);
  for (char c : a + b)
    if (c < '0' || c > '9') return false;
  *prefix = path.substr(0, path.size() - suffix_len);
  *part = std::stoi(a);
  *total = std::stoi(b);
  return *part >= 1 && *total >= 1 && *part <= *total;
}

std::vector<GgufSet> gguf_sets(const std::vector<std::string>& repo_files) {
  std::map<std::string, GgufSet> sets;  // sorted by name
  std::map<std::string, std::map<int, std::string>> parts;
  for (const auto& f : repo_files) {
    if (!ends_with_ci(f, ".gguf")) continue;
    if (ascii_lower(basename(f)).find("mmproj") != std::string::npos) continue;  // vision projector
    std::string prefix;
    int part = 0, total = 0;
    if (parse_split(f, &prefix, &part, &total)) {
      const std::string key = prefix + "\n" + std::to_string(total);
      sets[key].name = prefix;
      sets[key].expected_parts = total;
      parts[key][part] = f;
    } else {
      GgufSet s;
      s.name = f.substr(0, f.size() - 5);
      s.files = {f};
      sets[f] = s;
    }
  }
  std::vector<GgufSet> out;
  for (auto& [key, s] : sets) {
    if (s.files.empty()) {
      const auto& p = parts[key];
      if (static_cast<int>(p.size()) != s.expected_parts) continue;  // incomplete split: not loadable
      for (const auto& [idx, file] : p) s.files.push_back(file);
    }
    out.push_back(s);
  }
  return out;
}

bool is_boundary_before(char c) { return c == '/' || c == '.' || c == '-' || c == '_'; }
bool is_boundary_after(char c) { return c == '/' || c == '.' || c == '-'; }

// 2: the tag is a whole token of the name; 1: a substring; 0: absent.
int match_strength(const std::string& name, const std::string& tag) {
  const std::string n = ascii_lower(name), t = ascii_lower(tag);
  int best = 0;
  for (size_t at = n.find(t); at != std::string::npos; at = n.find(t, at + 1)) {
    const bool before = at == 0 || is_boundary_before(n[at - 1]);
    const size_t end = at + t.size();
    const bool after = end == n.size() || is_boundary_after(n[end]);
    best = std::max(best, before && after ? 2 : 1);
  }
  return best;
}

std::string join(const std::vector<std::string>& items, size_t max_items = 20) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > max_items) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s;
}

FileSelection from_set(const GgufSet& s) {
  FileSelection sel;
  sel.files = s.files;
  sel.model_file = s.files.front();
  sel.gguf_parts = static_cast<int>(s.files.size());
  return sel;
}

// The quant token of a set's name, upper-cased ("Q4_K_M", "F16"); "" when it has none.
std::string quant_token(const std::string& set_name) {
  std::string name = basename(set_name);
  std::string label;
  size_t start = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.' || name[i] == '-') {
      std::string token = ascii_lower(name.substr(start, i - start));
      const bool quant = (token.size() >= 2 && token[0] == 'q' && std::isdigit(static_cast<unsigned char>(token[1]))) ||
                         (token.size() >= 3 && token[0] == 'i' && token[1] == 'q' &&
                          std::isdigit(static_cast<unsigned char>(token[2]))) ||
                         token == "f16" || token == "f32" || token == "bf16" || token == "fp16" ||
                         token.rfind("mxfp4", 0) == 0;
      if (quant) label = name.substr(start, i - start);
      start = i + 1;
    }
  }
  for (char& c : label) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return label;
}

std::string quant_label(const std::string& set_name) {
  const std::string label = quant_token(set_name);
  return label.empty() ? basename(set_name) : label;
}

std::string dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// The number of folders `dir` has when it is `model_dir` or a folder above it; -1 otherwise.
int ancestor_depth(const std::string& dir, const std::string& model_dir) {
  if (!dir.empty() && dir != model_dir && model_dir.rfind(dir + "/", 0) != 0) return -1;
  return dir.empty() ? 0 : 1 + static_cast<int>(std::count(dir.begin(), dir.end(), '/'));
}

const char* const kSafetensorsSideFiles[] = {
    "config.json",      "generation_config.json",  "tokenizer.json", "tokenizer_config.json",
    "tokenizer.model",  "special_tokens_map.json", "chat_template.jinja", "vocab.json",
    "merges.txt",       "added_tokens.json",
};

}  // namespace

std::vector<std::string> quant_labels(const std::vector<std::string>& repo_files) {
  std::set<std::string> labels;
  for (const auto& s : gguf_sets(repo_files)) labels.insert(quant_label(s.name));
  return {labels.begin(), labels.end()};
}

FileSelection select_files(const std::string& repo_id, const std::vector<std::string>& repo_files,
                           const ModelRef& ref) {
  const std::vector<GgufSet> sets = gguf_sets(repo_files);
  if (!ref.file.empty()) {
    if (std::find(repo_files.begin(), repo_files.end(), ref.file) == repo_files.end()) {
      std::vector<std::string> ggufs;
      for (const auto& s : sets) ggufs.insert(ggufs.end(), s.files.begin(), s.files.end());
      throw Error(repo_id + " has no file '" + ref.file + "'" +
                  (ggufs.empty() ? std::string() : " (GGUF files: " + join(ggufs) + ")"));
    }
    // A part of a split GGUF brings its siblings: one part alone cannot be loaded.
    for (const auto& s : sets)
      if (s.files.size() > 1 && std::find(s.files.begin(), s.files.end(), ref.file) != s.files.end())
        return from_set(s);
    FileSelection sel;
    sel.files = {ref.file};
    sel.model_file = ref.file;
    sel.gguf_parts = ends_with_ci(ref.file, ".gguf") ? 1 : 0;
    return sel;
  }
  if (!sets.empty()) {
    if (!ref.quant.empty()) {
      std::vector<const GgufSet*> whole, partial;
      for (const auto& s : sets) {
        const int m = match_strength(s.name, ref.quant);
        if (m == 2) whole.push_back(&s);
        if (m == 1) partial.push_back(&s);
      }
      const auto& found = whole.empty() ? partial : whole;
      if (found.empty())
        throw Error(repo_id + " has no GGUF file for quant '" + ref.quant + "' (quants: " +
                    join(quant_labels(repo_files)) + ")");
      if (found.size() > 1) {
        std::vector<std::string> names;
        for (const auto* s : found) names.push_back(s->files.front());
        throw Error(repo_id + ": quant '" + ref.quant + "' matches several GGUF files (" + join(names) +
                    "); name one as " + repo_id + "/FILE");
      }
      return from_set(*found.front());
    }
    for (const char* preferred : {"Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q8_0"})
      for (const auto& s : sets)
        if (match_strength(s.name, preferred) == 2) return from_set(s);
    return from_set(sets.front());
  }
  // No GGUF: a Hugging Face safetensors directory.
  auto has = [&](const std::string& f) { return std::find(repo_files.begin(), repo_files.end(), f) != repo_files.end(); };
  if (!ref.quant.empty()) {
    throw Error(repo_id + " has no GGUF files, so no quant '" + ref.quant + "'" +
                (has("config.json") ? " (it is a safetensors repo: drop ':" + ref.quant + "')" : ""));
  }
  std::vector<std::string> weights;
  if (has("model.safetensors.index.json")) {
    weights = {"model.safetensors.index.json"};
  } else {
    for (const auto& f : repo_files)
      if (f.find('/') == std::string::npos && ends_with_ci(f, ".safetensors")) weights.push_back(f);
  }
  if (!has("config.json") || weights.empty())
    throw Error(repo_id + " has neither GGUF files nor config.json with safetensors weights");
  FileSelection sel;
  for (const char* f : kSafetensorsSideFiles)
    if (has(f)) sel.files.push_back(f);
  sel.files.insert(sel.files.end(), weights.begin(), weights.end());
  if (weights.front() == "model.safetensors.index.json") sel.safetensors_index = weights.front();
  return sel;
}

std::string select_mmproj(const std::vector<std::string>& repo_files, const std::string& model_file) {
  const std::string model_dir = dirname(model_file);
  std::vector<std::string> found;  // the candidates in the deepest folder, in name order
  int depth = -1;
  for (const auto& f : repo_files) {
    std::string prefix;
    int part = 0, total = 0;
    if (!ends_with_ci(f, ".gguf") || ascii_lower(basename(f)).find("mmproj") == std::string::npos ||
        parse_split(f, &prefix, &part, &total))
      continue;
    const int d = ancestor_depth(dirname(f), model_dir);
    if (d < 0 || d < depth) continue;
    if (d > depth) found.clear(), depth = d;
    found.push_back(f);
  }
  if (found.empty()) return "";
  std::sort(found.begin(), found.end());
  // The model's own quant first: a repo that ships a projector per quant means them as pairs.
  std::string model_set = model_file;
  {
    std::string prefix;
    int part = 0, total = 0;
    model_set = parse_split(model_file, &prefix, &part, &total) ? prefix : model_file.substr(0, model_file.size() - 5);
  }
  std::vector<std::string> preferred;
  if (const std::string q = quant_token(model_set); !q.empty()) preferred.push_back(q);
  for (const char* q : {"F16", "BF16", "F32"}) preferred.push_back(q);
  for (const auto& q : preferred)
    for (const auto& f : found)
      if (match_strength(basename(f).substr(0, basename(f).size() - 5), q) == 2) return f;
  return found.front();
}

std::vector<std::string> shards_from_index(const std::string& index_text, const std::string& index_path) {
  nlohmann::json index = parse_json_or_discarded(index_text);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(index_path + ": not a safetensors index (no weight_map object)");
  const size_t slash = index_path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : index_path.substr(0, slash + 1);
  std::set<std::string> shards;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw Error(index_path + ": weight_map['" + tensor + "'] is not a file name");
    const std::string name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." || name.find('\\') != std::string::npos)
      throw Error(index_path + ": weight_map['" + tensor + "'] = '" + name + "' is not a file beside the index");
    shards.insert(dir + name);
  }
  if (shards.empty()) throw Error(index_path + ": weight_map is empty");
  return {shards.begin(), shards.end()};
}

}  // namespace pagoda::hub
