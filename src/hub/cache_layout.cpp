#include "hub/cache_layout.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "hub/hub.h"

namespace pagoda::hub {

bool is_hex(const std::string& s, size_t length) {
  if (s.size() != length) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

namespace {

// A name unique to this process and call, for write-then-rename.
std::string temp_suffix() {
  static std::atomic<unsigned> counter{0};
  return ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
}

}  // namespace

std::string RepoCache::folder_name(const std::string& repo_id) {
  std::string name = "models--" + repo_id;
  size_t at = 0;
  while ((at = name.find('/', at)) != std::string::npos) name.replace(at, 1, "--");
  return name;
}

RepoCache::RepoCache(fs::path cache_dir, const std::string& repo_id)
    : cache_dir_(std::move(cache_dir)), folder_(folder_name(repo_id)), dir_(cache_dir_ / folder_) {}

fs::path RepoCache::lock_path(const std::string& etag) const { return cache_dir_ / ".locks" / folder_ / (etag + ".lock"); }

std::optional<std::string> RepoCache::resolve_revision(const std::string& revision) const {
  try {
    check_revision(revision);  // a path outside refs/ is no revision of this repo
  } catch (const Error&) {
    return std::nullopt;
  }
  std::ifstream in(dir_ / "refs" / revision);
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    std::string commit = ss.str();
    while (!commit.empty() && (commit.back() == '\n' || commit.back() == ' ' || commit.back() == '\r')) commit.pop_back();
    if (is_hex(commit, 40)) return commit;  // anything else would name a path, not a snapshot
  }
  std::error_code ec;
  if (is_hex(revision, 40) && fs::is_directory(snapshot_dir(revision), ec)) return revision;
  return std::nullopt;
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  check_revision(revision);  // pull() checked it already; this is where it becomes a path
  const fs::path ref = dir_ / "refs" / revision;
  fs::create_directories(ref.parent_path());
  const fs::path tmp = ref.string() + temp_suffix();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;
    if (!out) throw Error("cannot write " + tmp.string());
  }
  fs::rename(tmp, ref);
}

void RepoCache::link_snapshot(const std::string& commit, const std::string& file, const std::string& etag) const {
  const fs::path link = snapshot_dir(commit) / file;
  fs::create_directories(link.parent_path());
  std::string target = "../../blobs/" + etag;
  for (char c : file)
    if (c == '/') target = "../" + target;
  std::error_code ec;
  if (fs::is_symlink(link, ec) && fs::read_symlink(link, ec) == target) return;
  const fs::path tmp = link.string() + temp_suffix();
  fs::create_symlink(target, tmp);
  fs::rename(tmp, link);  // replaces an older link or a regular file atomically
}

bool RepoCache::snapshot_has(const std::string& commit, const std::string& file) const {
  std::error_code ec;
  return fs::is_regular_file(snapshot_dir(commit) / file, ec);  // follows the symlink
}

std::vector<std::string> RepoCache::snapshot_files(const std::string& commit) const {
  std::vector<std::string> files;
  const fs::path root = snapshot_dir(commit);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return files;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code e2;
    if (fs::is_regular_file(it->path(), e2)) files.push_back(it->path().lexically_relative(root).generic_string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<CachedRepo> list_cached(const HubConfig& config) {
  std::vector<CachedRepo> repos;
  std::error_code ec;
  if (!fs::is_directory(config.cache_dir, ec)) return repos;
  for (const auto& entry : fs::directory_iterator(config.cache_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("models--", 0) != 0 || !entry.is_directory()) continue;
    // huggingface_hub's scan_cache: "models--A--B" -> "A/B" (every "--" is a '/').
    std::string id = name.substr(8);
    size_t at = 0;
    while ((at = id.find("--", at)) != std::string::npos) id.replace(at, 2, "/");
    CachedRepo repo;
    repo.repo_id = id;
    repo.dir = entry.path();
    std::error_code e2;
    for (const auto& blob : fs::directory_iterator(entry.path() / "blobs", e2)) {
      if (!blob.is_regular_file()) continue;
      const uint64_t size = blob.file_size();
      if (blob.path().extension() == ".incomplete")
        repo.incomplete_bytes += size;
      else
        repo.size_bytes += size;
    }
    const fs::path refs = entry.path() / "refs";
    for (auto it = fs::recursive_directory_iterator(refs, e2); !e2 && it != fs::recursive_directory_iterator();
         it.increment(e2)) {
      if (!it->is_regular_file()) continue;
      RepoCache rc(config.cache_dir, id);
      const std::string revision = it->path().lexically_relative(refs).generic_string();
      if (auto commit = rc.resolve_revision(revision)) repo.refs[revision] = *commit;
    }
    for (const auto& snap : fs::directory_iterator(entry.path() / "snapshots", e2))
      if (snap.is_directory()) repo.snapshots.push_back(snap.path().filename().string());
    std::sort(repo.snapshots.begin(), repo.snapshots.end());
    repos.push_back(std::move(repo));
  }
  std::sort(repos.begin(), repos.end(), [](const CachedRepo& a, const CachedRepo& b) { return a.repo_id < b.repo_id; });
  return repos;
}

uint64_t remove_cached(const HubConfig& config, const std::string& repo_id) {
  const ModelRef ref = ModelRef::parse(repo_id);  // validates: no "..", exactly OWNER/REPO
  if (!ref.file.empty() || !ref.quant.empty())
    throw Error("pagoda rm takes OWNER/REPO, not '" + repo_id + "'");
  RepoCache rc(config.cache_dir, ref.repo_id);
  std::error_code ec;
  if (!fs::is_directory(rc.dir(), ec))
    throw Error(ref.repo_id + " is not in the cache (" + config.cache_dir.string() + ")");
  uint64_t freed = 0;
  for (const auto& repo : list_cached(config))
    if (repo.repo_id == ref.repo_id) freed = repo.size_bytes + repo.incomplete_bytes;
  fs::remove_all(rc.dir(), ec);
  if (ec) throw Error("cannot remove " + rc.dir().string() + ": " + ec.message());
  fs::remove_all(config.cache_dir / ".locks" / RepoCache::folder_name(ref.repo_id), ec);
  return freed;
}

}  // namespace pagoda::hub
