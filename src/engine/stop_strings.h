// StopStringMatcher — finds stop strings in streamed text and holds back what
// might be the start of one.
//
// Contract:
// - One matcher per sequence, fed by the engine thread with the decoded text of
//   each token, in order; not thread-safe. It owns copies of the stop strings.
// - push() returns the text that is safe to stream: everything except a tail
//   that could still grow into a stop string. When a stop string completes (even
//   split across many pushes), push() returns only the text before it, reports
//   stopped and which stop matched; the stop string and anything after it are
//   dropped (a caller that wants OpenAI's "include the stop string" appends
//   `matched`). After that the matcher is finished: later pushes emit nothing.
// - Which stop wins: the one whose match ends first in the text; of those ending
//   at the same byte, the longest (it starts earliest). This is where a byte-by-
//   byte stream would first see a complete stop, so the result does not depend on
//   how the text was cut into pushes (pinned by a test). Rejected: "earliest
//   start", as llama.cpp's server picks — with stops {"abcd", "bc"} it emits ""
//   for one push of "abcd" but "a" for "abc" then "d". For stops that do not
//   overlap the two rules agree: the stop that appears first wins.
// - UTF-8: held back is only the longest tail that is a proper prefix of some stop
//   string, in bytes, plus — so that emitted text never ends inside a character —
//   an incomplete UTF-8 sequence at the very end (at most 3 bytes, held until its
//   continuation bytes arrive). With valid UTF-8 stops and text the cut therefore
//   always falls on a character boundary. Bytes that cannot be part of valid
//   UTF-8 are passed through as they are.
// - Empty stop strings are ignored; with no stops the text passes straight
//   through (less any incomplete UTF-8 tail).
// - Cost: push() searches the held tail plus the new text, so it is
//   O((held + text) * total stop bytes); held <= max(longest stop - 1, 3) bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

class StopStringMatcher {
 public:
  struct Result {
    std::string emit;     // text safe to stream now (may be empty)
    bool stopped = false; // a stop string completed (now or before)
    std::string matched;  // that stop string; empty unless stopped
  };

  explicit StopStringMatcher(std::vector<std::string> stops);

  // Feeds the next piece of decoded text.
  Result push(std::string_view text);

  // Returns the held-back text and forgets it (at the end of generation, e.g.
  // on max_tokens or EOS, when no stop can complete any more). Empty once stopped.
  std::string flush();

  bool stopped() const { return stopped_; }
  // Bytes currently held back.
  size_t held_bytes() const { return held_.size(); }
  // The non-empty stop strings, in the order given.
  const std::vector<std::string>& stops() const { return stops_; }

  // Invariants:
  // 1. stops_ holds no empty string; max_stop_bytes_ is the longest of them.
  // 2. held_ contains no complete stop string.
  // 3. held_.size() <= max(max_stop_bytes_ - 1, 3); empty once stopped.
  // Aborts with a message when one is broken.
  void check_invariants() const;

 private:
  // Bytes at the end of held_ to keep back: the longer of the longest suffix
  // that is a proper prefix of a stop and an incomplete UTF-8 tail.
  size_t hold_length() const;

  std::vector<std::string> stops_;
  size_t max_stop_bytes_ = 0;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace pagoda
