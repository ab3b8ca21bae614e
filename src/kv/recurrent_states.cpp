#include "kv/recurrent_states.h"

#include <string>

#include "common/error.h"

namespace pagoda {

void RecurrentStates::configure(int64_t n_slots, int64_t floats_per_slot) {
  PAGODA_CHECK(states_.empty(), "RecurrentStates::configure with states held");
  PAGODA_CHECK(n_slots >= 0 && floats_per_slot >= 0, "RecurrentStates: negative size");
  n_slots_ = n_slots;
  floats_per_slot_ = floats_per_slot;
}

void RecurrentStates::ensure(SeqId seq) {
  PAGODA_CHECK(enabled(), "RecurrentStates: not configured");
  auto& s = states_[seq];
  if (!s) {
    s = std::make_unique<State>();
    s->data.assign(static_cast<size_t>(n_slots_ * floats_per_slot_), 0.0f);
  }
}

const RecurrentStates::State& RecurrentStates::get(SeqId seq) const {
  const auto it = states_.find(seq);
  PAGODA_CHECK(it != states_.end(), "RecurrentStates: sequence " + std::to_string(seq) + " has no state");
  return *it->second;
}

float* RecurrentStates::slot(SeqId seq, int64_t slot) {
  return const_cast<float*>(static_cast<const RecurrentStates*>(this)->slot(seq, slot));
}

const float* RecurrentStates::slot(SeqId seq, int64_t slot) const {
  PAGODA_CHECK(slot >= 0 && slot < n_slots_, "RecurrentStates: slot " + std::to_string(slot) + " out of range");
  return get(seq).data.data() + slot * floats_per_slot_;
}

int64_t RecurrentStates::pos(SeqId seq) const {
  const auto it = states_.find(seq);
  return it == states_.end() ? 0 : it->second->pos;
}

void RecurrentStates::set_pos(SeqId seq, int64_t pos) {
  const auto it = states_.find(seq);
  PAGODA_CHECK(it != states_.end(), "RecurrentStates: sequence " + std::to_string(seq) + " has no state");
  it->second->pos = pos;
}

void RecurrentStates::copy(SeqId src, SeqId dst) {
  const State& s = get(src);
  auto& d = states_[dst];
  d = std::make_unique<State>(s);
}

}  // namespace pagoda
