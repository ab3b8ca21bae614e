// `pagoda inspect MODEL`: metadata and tensor table.
#include <cstdio>

#include "cli/commands.h"
#include "gguf/gguf.h"

namespace pagoda::cli {

Runner add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto max_items = std::make_shared<size_t>(8);
  app.add_option("model", *path, "GGUF file")->required();
  app.add_option("--max-array-items", *max_items, "Array items shown per key")->capture_default_str();
  return [=] {
    gguf::GgufFile f = gguf::GgufFile::open(*path);
    std::printf("file: %s\nGGUF version %u, alignment %llu, %zu metadata keys, %zu tensors\n\n",
                f.path().c_str(), f.version(), static_cast<unsigned long long>(f.alignment()),
                f.metadata().size(), f.tensors().size());
    std::printf("metadata:\n");
    for (const auto& [key, value] : f.metadata())
      std::printf("  %-48s %-8s %s\n", key.c_str(), gguf::value_type_name(value.type),
                  value.to_display_string(*max_items).c_str());
    std::printf("\ntensors:\n  %-40s %-6s %-24s %14s\n", "name", "type", "shape", "bytes");
    uint64_t total = 0;
    for (const auto& t : f.tensors()) {
      std::string tn = t.type_known ? type_name(t.type) : "id " + std::to_string(t.type_id);
      std::printf("  %-40s %-6s %-24s %14llu\n", t.name.c_str(), tn.c_str(), t.shape_string().c_str(),
                  static_cast<unsigned long long>(t.n_bytes));
      total += t.n_bytes;
    }
    std::printf("  total tensor bytes: %llu (%.2f MiB)\n", static_cast<unsigned long long>(total),
                total / 1048576.0);
    return 0;
  };
}

}  // namespace pagoda::cli
