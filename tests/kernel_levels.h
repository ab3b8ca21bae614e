// The ISA levels a kernel test runs: every level this CPU runs whose kernel for the entry
// under test differs from every lower level's, so each distinct kernel is checked once
// (AMX shares all but its prefill entries with AVX-512; testing them twice would double
// the sweeps for nothing).
#pragma once

#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/kernel_table.h"

namespace pagoda::test {

// entry(table) -> the function pointer(s) under test, comparable with ==. runs(isa): whether
// the level runs here (isa_supported, or a test's own rule under emulation).
template <class Entry, class Runs>
std::vector<Isa> levels_with_own(Entry entry, Runs runs) {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (!runs(isa)) continue;
    bool same = false;
    for (Isa lower : out) same = same || entry(kernel_table(lower)) == entry(kernel_table(isa));
    if (!same) out.push_back(isa);
  }
  return out;
}
// By default a level runs where matmul_detail::isa_runs says: the CPU has it, or it is the
// AVX-512 level of the emulation build (preset `emu`).
template <class Entry>
std::vector<Isa> levels_with_own(Entry entry) {
  return levels_with_own(entry, [](Isa isa) { return matmul_detail::isa_runs(isa); });
}

}  // namespace pagoda::test
