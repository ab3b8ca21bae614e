// Case folding for parsing flags and type names ("Q4_K", "4GiB", "Unlimited"): pure, any
// thread.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace pagoda {

// s with each byte passed through std::tolower (as unsigned char, so bytes >= 0x80 are
// safe); pagoda never sets a locale, so this maps ASCII A-Z to a-z and nothing else.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace pagoda
