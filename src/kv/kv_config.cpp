#include "kv/kv_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/ascii.h"
#include "common/error.h"
#include "common/system_memory.h"

namespace pagoda {

uint64_t parse_byte_size(std::string_view text, std::string_view flag) {
  const std::string bad = std::string(flag) + ": '" + std::string(text) +
                          "' is not a byte size (expected a number with an optional suffix: "
                          "B, K/KiB, M/MiB, G/GiB, T/TiB, KB, MB, GB, TB; e.g. 512MiB, 4GiB)";
  size_t i = 0;
  bool seen_digit = false, seen_dot = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    if (text[i] == '.') {
      if (seen_dot) throw Error(bad);
      seen_dot = true;
    } else {
      seen_digit = true;
    }
    ++i;
  }
  if (!seen_digit) throw Error(bad);
  const std::string number(text.substr(0, i));
  const std::string suffix = ascii_lower(text.substr(i));
  long double mult = 0;
  struct Unit {
    const char* name;
    long double mult;
  };
  static const Unit kUnits[] = {
      {"", 1},           {"b", 1},
      {"k", 1024.0L},    {"kib", 1024.0L},    {"kb", 1e3L},
      {"m", 1048576.0L}, {"mib", 1048576.0L}, {"mb", 1e6L},
      {"g", 1073741824.0L}, {"gib", 1073741824.0L}, {"gb", 1e9L},
      {"t", 1099511627776.0L}, {"tib", 1099511627776.0L}, {"tb", 1e12L},
  };
  for (const Unit& u : kUnits)
    if (suffix == u.name) mult = u.mult;
  if (mult == 0) throw Error(bad);
  const long double value = std::strtold(number.c_str(), nullptr) * mult;
  if (!(value < 9.2e18L))
    throw Error(std::string(flag) + ": '" + std::string(text) + "' is too large");
  return static_cast<uint64_t>(std::floor(value));
}

std::string format_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

KvType parse_kv_type_flag(std::string_view text, std::string_view flag) {
  if (auto t = parse_kv_type(text)) return *t;
  // llama.cpp's names (-ctk q8_0): 8-bit and 4-bit rows with their scales, as pagoda's q8
  // and q4 are (their scale groups differ: q4's is 32, 16 or 8 values by head_dim).
  const std::string lower = ascii_lower(text);
  if (lower == "q8_0") return KvType::Q8;
  if (lower == "q4_0") return KvType::Q4;
  throw Error(std::string(flag) + ": unknown KV type '" + std::string(text) + "' (expected one of " +
              kv_type_names() + ")");
}

void validate_kv_block_size(int64_t block_size, std::string_view flag) {
  if (block_size < 8 || block_size > 256 || (block_size & (block_size - 1)) != 0)
    throw Error(std::string(flag) + ": " + std::to_string(block_size) +
                " is not a power of two between 8 and 256");
}

KvBudgetChoice choose_kv_budget(uint64_t requested, const SystemMemory& memory, uint64_t weights_unaccounted) {
  KvBudgetChoice c;
  const uint64_t avail = memory.available();
  const uint64_t headroom = std::max<uint64_t>(kKvMinHeadroomBytes, static_cast<uint64_t>(static_cast<double>(memory.limit()) * kKvHeadroomFraction));
  c.usable = avail > weights_unaccounted + headroom ? avail - weights_unaccounted - headroom : 0;
  auto how = [&] {
    return memory.describe() + ", less " + format_bytes(weights_unaccounted) + " of weights and " +
           format_bytes(headroom) + " of headroom";
  };
  if (requested == 0) {
    if (avail == 0)
      throw Error("--kv-cache-bytes: cannot tell how much memory is available (/proc/meminfo); give the KV budget explicitly");
    if (c.usable == 0)
      throw Error("not enough memory left for a KV cache: " + how() + "; free some, or give --kv-cache-bytes");
    c.bytes = c.usable;
    return c;
  }
  c.bytes = requested;
  if (avail > 0 && requested > c.usable) {
    if (c.usable == 0)
      throw Error("--kv-cache-bytes " + format_bytes(requested) + ": no memory is left for it (" + how() + ")");
    c.bytes = c.usable;
    c.capped = true;
    c.warning = "--kv-cache-bytes " + format_bytes(requested) + " is more than memory allows; using " +
                format_bytes(c.usable) + " (" + how() + ")";
  }
  return c;
}

uint64_t resolve_kv_budget(const KvConfig& config) {
  if (config.budget_bytes != 0) return config.budget_bytes;
  return choose_kv_budget(0, read_system_memory(), 0).bytes;
}

}  // namespace pagoda
