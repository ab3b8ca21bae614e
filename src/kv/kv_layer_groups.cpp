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

KvLayerGroups KvLayerGroups::for_layers(std::span<const KvLayerShape> layers, bool swa_full) {
  std::vector<int64_t> windows;
  windows.reserve(layers.size());
  bool one_shape = true;
  for (const KvLayerShape& l : layers) {
    windows.push_back(l.window);
    one_shape = one_shape && l.shape == layers.front().shape;
  }
  KvLayerGroups g = for_windows(windows, swa_full);
  if (one_shape) return g;
  // Mixed shapes. Windowed only when every local layer has one shape (its page is then cut
  // into equal slots); else one group with a slot per layer.
  bool local_one_shape = true;
  const KvLayerShape* first_local = nullptr;
  for (const KvLayerShape& l : layers) {
    if (l.window <= 0) continue;
    if (!first_local) first_local = &l;
    local_one_shape = local_one_shape && l.shape == first_local->shape;
  }
  if (!g.windowed() || !local_one_shape) {
    g = uniform(static_cast<int64_t>(layers.size()));
    g.slot_shapes.assign(1, {});
    for (const KvLayerShape& l : layers) g.slot_shapes[0].push_back(l.shape);
    return g;
  }
  // Group 0 as for_windows numbered it; local layers re-cut into pages of as many local
  // slots as the global page's elements hold (at least one).
  int64_t page_elements = 0;
  std::vector<KvSlotShape> global_slots;
  for (const KvLayerShape& l : layers)
    if (l.window <= 0) {
      global_slots.push_back(l.shape);
      page_elements += l.shape.elements();
    }
  const int64_t local_slots = std::max<int64_t>(1, page_elements / first_local->shape.elements());
  KvLayerGroups m;
  m.page_layers = std::max<int64_t>(static_cast<int64_t>(global_slots.size()), local_slots);
  m.group.resize(layers.size());
  m.slot.resize(layers.size());
  m.window = {0};
  m.used_slots = {static_cast<int32_t>(global_slots.size())};
  m.slot_shapes = {global_slots};
  int32_t global_slot = 0, local_index = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].window <= 0) {
      m.group[i] = 0;
      m.slot[i] = global_slot++;
      continue;
    }
    const int32_t grp = 1 + local_index / static_cast<int32_t>(local_slots);
    if (grp == m.n_groups()) {
      m.window.push_back(layers[i].window);
      m.used_slots.push_back(0);
      m.slot_shapes.emplace_back(static_cast<size_t>(local_slots), first_local->shape);
    }
    m.group[i] = grp;
    m.slot[i] = local_index % static_cast<int32_t>(local_slots);
    ++m.used_slots[static_cast<size_t>(grp)];
    ++local_index;
  }
  return m;
}

std::string KvLayerGroups::describe() const {
  std::string s = std::to_string(n_layers()) + " layers: ";
  if (!windowed()) {
    s += "1 group (every layer keeps the whole context)";
    if (!slot_shapes.empty()) s += ", head shapes differ by layer";
    return s;
  }
  int64_t padding = 0;
  for (int32_t k = 1; k < n_groups(); ++k) padding += slots_in_group(k) - used_slots[static_cast<size_t>(k)];
  s += "1 global group of " + std::to_string(slots_in_group(0)) + ", " + std::to_string(n_groups() - 1) +
       " local group" + (n_groups() > 2 ? "s" : "") + " of " + std::to_string(slots_in_group(1)) + " (window " +
       std::to_string(window[1]) + ")";
  if (padding > 0) s += ", " + std::to_string(padding) + " padding slot" + (padding > 1 ? "s" : "");
  return s;
}

}  // namespace pagoda
