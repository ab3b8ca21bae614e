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
//
// Layers of different K/V head shapes (Gemma 4: global layers with 512-wide heads, local
// ones with 256-wide heads; 31B also 4 global KV heads against 16 local ones): each slot
// of a page has its own shape (slot_shapes). A local page then holds as many local slots
// as fit in the global page's elements (E4B: 4 global slots of 2 x 512 = 8 local slots of
// 2 x 256), so pages still have one size and one pool serves them; a group whose slots
// fill less than the largest page is padding. Rejected: sizing every slot for the widest
// layer (E4B: half of every local slot unused, 29% of its K/V bytes at 8k wasted).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pagoda {

// The K/V of one layer per token: n_kv_heads rows of head_dim values each.
struct KvSlotShape {
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t elements() const { return n_kv_heads * head_dim; }
  bool operator==(const KvSlotShape&) const = default;
};

// One layer with a KV cache, as the model sees it: its head shape and its window (0: global).
struct KvLayerShape {
  int64_t window = 0;
  KvSlotShape shape;
};

struct KvLayerGroups {
  int64_t page_layers = 0;         // layer slots per block: the pool's KvGeometry::n_layers
  std::vector<int32_t> group;      // [model layers] the group holding each layer
  std::vector<int32_t> slot;       // [model layers] its slot in that group's page
  std::vector<int64_t> window;     // [groups] the window of the group's layers (0: global)
  std::vector<int32_t> used_slots; // [groups] layers in the group (< page_layers: padding)
  // [groups][slots of the group's page] the head shape of each slot, when the layers differ
  // in it (see the contract); a group's page may then hold fewer than page_layers slots.
  // Empty: every slot of every group has the model's one shape, page_layers of them.
  std::vector<std::vector<KvSlotShape>> slot_shapes;

  int64_t n_layers() const { return static_cast<int64_t>(group.size()); }
  int32_t n_groups() const { return static_cast<int32_t>(window.size()); }
  bool windowed() const { return n_groups() > 1; }

  // One group, slot == layer.
  static KvLayerGroups uniform(int64_t n_layers);
  // layer_windows[l]: the window of layer l (0: the whole context). Windowed groups as in
  // the contract unless swa_full or the layout cannot be paged (then uniform).
  static KvLayerGroups for_windows(std::span<const int64_t> layer_windows, bool swa_full = false);
  // The same from each layer's window and head shape. Layers of one shape give exactly
  // for_windows (slot_shapes empty); mixed shapes fill slot_shapes. Windowed only when the
  // local layers share one window and one shape; otherwise one group of every layer.
  static KvLayerGroups for_layers(std::span<const KvLayerShape> layers, bool swa_full = false);
  // Slots of group g's page (page_layers unless slot_shapes says otherwise).
  int64_t slots_in_group(int32_t g) const {
    return slot_shapes.empty() ? page_layers : static_cast<int64_t>(slot_shapes[static_cast<size_t>(g)].size());
  }
  // "34 layers: 1 global group of 5, 6 local groups of 5 (window 1024, 1 padding slot)".
  std::string describe() const;
};

}  // namespace pagoda
