// KvLayerGroups — which pool page, and which slot in it, holds each layer's K/V.
//
// Contract: a model whose layers all attend to the whole context has one group (group 0,
// every layer, slot == layer): the pool's blocks are slabs of all layers, as they always
// were. A model with sliding-window ("local") layers (Gemma 2 / 3) gets group 0 for its
// global layers and groups 1..k for its local layers, cut into runs of as many layers as
// there are global ones, so every group's block has the same bytes and ONE pool (one free
// list, one LRU list, one byte ledger) serves them all. A sequence holds one BlockTable
// per group; a local group's table releases blocks that fell out of the window
// (PagedKvPool::release_before), which is where the memory goes back to the pool.
//
// Why pages of n_global layers: the alternatives were one pool per group (a budget split
// between them is a guess that depends on the requests' lengths: a wrong guess strands
// memory in one pool while the other preempts) or per-layer blocks (34 block tables per
// sequence for gemma3-4b, 34 COW copies per shared tail, and a KvLayerView per layer
// per block lookup). The cost of pages is padding when n_local is not a multiple of
// n_global: gemma3-4b (5 global, 29 local) pads one slot of 30, 3.3% of the local bytes.
//
// Not windowed (one group): no local layers, no global layer (a layout of local layers
// only has nothing to page them against; it keeps the mask-only path), local layers with
// different windows, or swa_full (the user asked for full-size windows, --kv-swa-full).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pagoda {

struct KvLayerGroups {
  int64_t page_layers = 0;         // layer slots per block: the pool's KvGeometry::n_layers
  std::vector<int32_t> group;      // [model layers] the group holding each layer
  std::vector<int32_t> slot;       // [model layers] its slot in that group's page
  std::vector<int64_t> window;     // [groups] the window of the group's layers (0: global)
  std::vector<int32_t> used_slots; // [groups] layers in the group (< page_layers: padding)

  int64_t n_layers() const { return static_cast<int64_t>(group.size()); }
  int32_t n_groups() const { return static_cast<int32_t>(window.size()); }
  bool windowed() const { return n_groups() > 1; }

  // One group, slot == layer.
  static KvLayerGroups uniform(int64_t n_layers);
  // layer_windows[l]: the window of layer l (0: the whole context). Windowed groups as in
  // the contract unless swa_full or the layout cannot be paged (then uniform).
  static KvLayerGroups for_windows(std::span<const int64_t> layer_windows, bool swa_full = false);
  // "34 layers: 1 global group of 5, 6 local groups of 5 (window 1024, 1 padding slot)".
  std::string describe() const;
};

}  // namespace pagoda
