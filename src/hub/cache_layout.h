// The huggingface_hub cache layout (see hub.h for the tree): paths, refs, snapshot symlinks.
// Internal to src/hub. All functions are safe from any thread; writers of one path race only
// through atomic renames (a ref or a snapshot link is replaced whole, never half-written).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace pagoda::hub {

namespace fs = std::filesystem;

class RepoCache {
 public:
  // Requires: repo_id is "OWNER/REPO" as ModelRef::parse checked it.
  RepoCache(fs::path cache_dir, const std::string& repo_id);

  // "models--OWNER--REPO" (huggingface_hub's repo_folder_name for models).
  static std::string folder_name(const std::string& repo_id);

  const fs::path& dir() const { return dir_; }
  fs::path blob_path(const std::string& etag) const { return dir_ / "blobs" / etag; }
  fs::path snapshot_dir(const std::string& commit) const { return dir_ / "snapshots" / commit; }
  fs::path lock_path(const std::string& etag) const;

  // The commit refs/<revision> holds; a 40-hex revision is its own commit when a snapshot
  // of it exists. nullopt when unknown, or not a revision check_revision() (hub.h) accepts.
  std::optional<std::string> resolve_revision(const std::string& revision) const;
  // Writes refs/<revision> = commit (no newline, as huggingface_hub writes it), atomically;
  // a revision with '/' is a nested file (refs/pr/1 -> refs/refs/pr/1). Throws Error for a
  // revision check_revision() refuses.
  void write_ref(const std::string& revision, const std::string& commit) const;

  // Makes snapshots/<commit>/<file> a relative symlink to the blob (../../blobs/<etag>, one
  // more "../" per directory level in `file`), replacing what was there.
  void link_snapshot(const std::string& commit, const std::string& file, const std::string& etag) const;

  // True when snapshots/<commit>/<file> exists and resolves to a regular file.
  bool snapshot_has(const std::string& commit, const std::string& file) const;

  // Repo paths of every regular file (or symlink to one) under snapshots/<commit>, sorted.
  std::vector<std::string> snapshot_files(const std::string& commit) const;

 private:
  fs::path cache_dir_;
  std::string folder_;
  fs::path dir_;
};

bool is_hex(const std::string& s, size_t length);

}  // namespace pagoda::hub
