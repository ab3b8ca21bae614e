#include "kv/kv_layer_groups.h"

#include <algorithm>

namespace pagoda {

KvLayerGroups KvLayerGroups::uniform(int64_t n_layers) {
  KvLayerGroups g;
  g.page_layers = n_layers;
  g.group.assign(static_cast<size_t>(n_layers), 0);
  g.slot.resize(static_cast<size_t>(n_layers));
  for (int64_t l = 0; l < n_layers; ++l) g.slot[static_cast<size_t>(l)] = static_cast<int32_t>(l);
  g.window = {0};
  g.used_slots = {static_cast<int32_t>(n_layers)};
  return g;
}

KvLayerGroups KvLayerGroups::for_windows(std::span<const int64_t> layer_windows, bool swa_full) {
  const int64_t n = static_cast<int64_t>(layer_windows.size());
  int64_t n_global = 0, w = 0;
  bool one_window = true;
  for (int64_t x : layer_windows) {
    if (x <= 0) {
      ++n_global;
    } else if (w == 0) {
      w = x;
    } else if (x != w) {
      one_window = false;
    }
  }
  if (swa_full || w == 0 || n_global == 0 || !one_window) return uniform(n);
  KvLayerGroups g;
  g.page_layers = n_global;
  g.group.resize(static_cast<size_t>(n));
  g.slot.resize(static_cast<size_t>(n));
  g.window = {0};
  g.used_slots = {static_cast<int32_t>(n_global)};
  int32_t global_slot = 0, local_index = 0;
  for (int64_t l = 0; l < n; ++l) {
    const size_t i = static_cast<size_t>(l);
    if (layer_windows[i] <= 0) {
      g.group[i] = 0;
      g.slot[i] = global_slot++;
      continue;
    }
    const int32_t grp = 1 + local_index / static_cast<int32_t>(n_global);
    if (grp == g.n_groups()) {
      g.window.push_back(w);
      g.used_slots.push_back(0);
    }
    g.group[i] = grp;
    g.slot[i] = local_index % static_cast<int32_t>(n_global);
    ++g.used_slots[static_cast<size_t>(grp)];
    ++local_index;
  }
  return g;
}

std::string KvLayerGroups::describe() const {
  std::string s = std::to_string(n_layers()) + " layers: ";
  if (!windowed()) return s + "1 group (every layer keeps the whole context)";
  int64_t padding = 0;
  for (int32_t k = 1; k < n_groups(); ++k) padding += page_layers - used_slots[static_cast<size_t>(k)];
  s += "1 global group of " + std::to_string(page_layers) + ", " + std::to_string(n_groups() - 1) +
       " local group" + (n_groups() > 2 ? "s" : "") + " of " + std::to_string(page_layers) + " (window " +
       std::to_string(window[1]) + ")";
  if (padding > 0) s += ", " + std::to_string(padding) + " padding slot" + (padding > 1 ? "s" : "");
  return s;
}

}  // namespace pagoda
