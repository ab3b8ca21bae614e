// RecurrentStates — the recurrent state of each sequence of a hybrid model (Gated DeltaNet
// layers, qwen35): per recurrent layer slot, `floats_per_slot` f32 (the convolution's
// window and the delta rule's matrices: ModelConfig::recurrent_state_floats), and how many
// tokens the state has absorbed.
//
// Contract:
// - A sequence's state appears on first use, zeroed at position 0 (the state before any
//   token), and goes with erase(). Unlike K/V it cannot be cut back: a state at position p
//   is the whole prefix folded in, so continuing a sequence from p' < p needs a state
//   saved at p' (a snapshot), never this one.
// - Memory: exact, bytes() = sequences x slots x floats_per_slot x 4, allocated per
//   sequence on first use and freed on erase.
// - Threads: the owner thread creates, erases and positions states; kernel workers may
//   read and write different (sequence, slot) states concurrently inside a forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace pagoda {

using SeqId = int32_t;

class RecurrentStates {
 public:
  // Requires: no state held. n_slots 0 turns it off.
  void configure(int64_t n_slots, int64_t floats_per_slot);
  bool enabled() const { return n_slots_ > 0; }
  int64_t n_slots() const { return n_slots_; }
  int64_t floats_per_slot() const { return floats_per_slot_; }

  // Creates the state of `seq` (zeroed, position 0) when it has none. Owner thread.
  void ensure(SeqId seq);
  bool contains(SeqId seq) const { return states_.count(seq) != 0; }
  // Slot `slot` of `seq`'s state. Requires: ensure(seq) was called (any thread after).
  float* slot(SeqId seq, int64_t slot);
  const float* slot(SeqId seq, int64_t slot) const;
  // The whole state of `seq` (every slot, bytes_per_state() bytes), for snapshots.
  // Requires: ensure(seq) was called.
  uint8_t* data(SeqId seq) { return reinterpret_cast<uint8_t*>(slot(seq, 0)); }
  const uint8_t* data(SeqId seq) const { return reinterpret_cast<const uint8_t*>(slot(seq, 0)); }
  // Tokens the state has absorbed (0 for a sequence without one).
  int64_t pos(SeqId seq) const;
  void set_pos(SeqId seq, int64_t pos);
  void erase(SeqId seq) { states_.erase(seq); }
  // dst's state becomes a copy of src's (creating dst's).
  void copy(SeqId src, SeqId dst);
  void clear() { states_.clear(); }
  size_t num_states() const { return states_.size(); }
  uint64_t bytes_per_state() const {
    return static_cast<uint64_t>(n_slots_) * static_cast<uint64_t>(floats_per_slot_) * sizeof(float);
  }
  uint64_t bytes() const { return bytes_per_state() * states_.size(); }

 private:
  struct State {
    std::vector<float> data;  // [n_slots, floats_per_slot]
    int64_t pos = 0;
  };
  const State& get(SeqId seq) const;
  int64_t n_slots_ = 0;
  int64_t floats_per_slot_ = 0;
  std::unordered_map<SeqId, std::unique_ptr<State>> states_;
};

}  // namespace pagoda
