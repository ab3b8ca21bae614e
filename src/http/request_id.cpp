#include "http/request_id.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <random>

namespace pagoda::http {

bool is_acceptable_request_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdBytes) return false;
  for (char c : id)
    if (c < 0x21 || c > 0x7E) return false;  // char may be signed: bytes >= 0x80 are < 0x21 too
  return true;
}

std::string new_request_id() {
  // 64 random bits (two 32-bit draws: random_device yields unsigned int) name the
  // process; the counter's low 32 bits tell its requests apart.
  static const uint64_t stem = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  static std::atomic<uint64_t> counter{0};
  const uint64_t n = counter.fetch_add(1) + 1;
  char buf[40];
  std::snprintf(buf, sizeof buf, "req_%016llx%08llx", static_cast<unsigned long long>(stem),
                static_cast<unsigned long long>(n & 0xffffffffu));
  return buf;
}

std::string request_id_for(std::string_view client_id) {
  return is_acceptable_request_id(client_id) ? std::string(client_id) : new_request_id();
}

}  // namespace pagoda::http
