// `pagoda pull`, `pagoda list`, `pagoda rm`: models from the Hugging Face Hub, in the cache
// huggingface_hub shares (hub/hub.h).
#include <cstdio>

#include "cli/commands.h"
#include "common/error.h"
#include "hub/hub.h"

namespace pagoda::cli {

namespace {

std::string human_size(uint64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1ull << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  return buf;
}

}  // namespace

Runner add_pull(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  auto revision = std::make_shared<std::string>("main");
  app.add_option("model", *name, "OWNER/REPO, OWNER/REPO:QUANT (e.g. :Q4_K_M) or OWNER/REPO/FILE (hf:// optional)")
      ->required();
  app.add_option("--revision", *revision, "Branch, tag or commit")->capture_default_str();
  auto no_mmproj = std::make_shared<bool>(false);
  app.add_flag("--no-mmproj", *no_mmproj, "Not the repo's vision projector (mmproj file), which a GGUF model brings");
  return [=] {
    hub::ModelRef ref = hub::ModelRef::parse(*name);
    ref.revision = *revision;
    const hub::HubConfig config = hub::HubConfig::from_env();
    hub::PullOptions options;
    options.mmproj = !*no_mmproj;
    const hub::PullResult r = hub::pull(config, ref, options);
    std::fprintf(stderr, "%s @ %s: %zu file%s%s%s\n", r.repo_id.c_str(), r.commit.substr(0, 12).c_str(),
                 r.files.size(), r.files.size() == 1 ? "" : "s",
                 r.downloaded_bytes ? (", downloaded " + human_size(r.downloaded_bytes)).c_str() : ", all cached",
                 r.used_cache_only ? " (cache only)" : "");
    if (!r.mmproj_path.empty()) std::fprintf(stderr, "vision projector: %s\n", r.mmproj_path.c_str());
    std::printf("%s\n", r.model_path.c_str());  // what -m takes
    return 0;
  };
}

Runner add_list(CLI::App& app) {
  return [] {
    const hub::HubConfig config = hub::HubConfig::from_env();
    const auto repos = hub::list_cached(config);
    if (repos.empty()) {
      std::fprintf(stderr, "no models in %s\n", config.cache_dir.c_str());
      return 0;
    }
    std::printf("%-48s %12s  %s\n", "REPO", "SIZE", "REVISIONS");
    for (const auto& r : repos) {
      std::string revisions;
      for (const auto& [rev, commit] : r.refs) revisions += (revisions.empty() ? "" : ", ") + rev + "=" + commit.substr(0, 12);
      for (const auto& snap : r.snapshots) {
        bool named = false;
        for (const auto& [rev, commit] : r.refs) named = named || commit == snap;
        if (!named) revisions += (revisions.empty() ? "" : ", ") + snap.substr(0, 12);
      }
      std::string size = human_size(r.size_bytes);
      if (r.incomplete_bytes) size += " (+" + human_size(r.incomplete_bytes) + " partial)";
      std::printf("%-48s %12s  %s\n", r.repo_id.c_str(), size.c_str(), revisions.c_str());
    }
    std::printf("cache: %s\n", config.cache_dir.c_str());
    return 0;
  };
}

Runner add_rm(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  app.add_option("repo", *name, "OWNER/REPO to delete from the cache (every revision and quant)")->required();
  return [=] {
    std::string id = *name;
    if (hub::is_hub_uri(id)) id = id.substr(5);
    const uint64_t freed = hub::remove_cached(hub::HubConfig::from_env(), id);
    std::fprintf(stderr, "removed %s (%s)\n", id.c_str(), human_size(freed).c_str());
    return 0;
  };
}

}  // namespace pagoda::cli
