// StreamingChatParser against parse_chat_output: for every sample output, split at
// every byte boundary, fed one byte at a time, and in random chunks, the deltas must
// reassemble exactly into the one-shot parse (content, reasoning, each call's id, name
// and arguments), and message() after finish() must equal it.
#include <gtest/gtest.h>

#include <random>

#include "chat/chat_format.h"
#include "chat_test_outputs.h"

namespace pagoda::chat {
namespace {

using testing::sample_outputs;
using testing::with_tools;

struct Reassembled {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
};

Reassembled run(const ChatFormat& f, const ParseOptions& o, const std::vector<std::string>& chunks,
                const ParsedMessage** final_message = nullptr, StreamingChatParser* keep = nullptr) {
  StreamingChatParser p(f, o);
  Reassembled r;
  auto apply = [&](const std::vector<ChatDelta>& ds) {
    for (const ChatDelta& d : ds) {
      switch (d.kind) {
        case ChatDelta::Kind::Content: r.content += d.text; break;
        case ChatDelta::Kind::Reasoning: r.reasoning += d.text; break;
        case ChatDelta::Kind::ToolCallStart:
          EXPECT_EQ(d.index, static_cast<int>(r.calls.size()));
          r.calls.push_back({d.id, d.name, ""});
          break;
        case ChatDelta::Kind::ToolCallArguments:
          EXPECT_EQ(d.index + 1, static_cast<int>(r.calls.size()));  // fragments of the latest call
          if (d.index >= 0 && d.index < static_cast<int>(r.calls.size())) r.calls[d.index].arguments += d.text;
          break;
      }
    }
  };
  for (const std::string& c : chunks) apply(p.push(c));
  apply(p.finish());
  EXPECT_TRUE(p.finish().empty());
  if (keep) *keep = std::move(p);
  (void)final_message;
  return r;
}

void expect_same(const Reassembled& r, const ParsedMessage& m, const std::string& what) {
  EXPECT_EQ(r.content, m.content.value_or("")) << what;
  EXPECT_EQ(r.reasoning, m.reasoning_content) << what;
  ASSERT_EQ(r.calls.size(), m.tool_calls.size()) << what;
  for (size_t i = 0; i < r.calls.size(); ++i) {
    EXPECT_EQ(r.calls[i].id, m.tool_calls[i].id) << what;
    EXPECT_EQ(r.calls[i].name, m.tool_calls[i].name) << what;
    EXPECT_EQ(r.calls[i].arguments, m.tool_calls[i].arguments) << what;
  }
}

// Every sample plus every prefix of it (a generation cut anywhere by max_tokens).
std::vector<testing::Sample> samples_and_cuts() {
  std::vector<testing::Sample> out;
  for (const auto& s : sample_outputs()) {
    out.push_back(s);
    for (size_t n = 1; n < s.text.size(); n += 7) {
      testing::Sample cut = s;
      cut.text = s.text.substr(0, n);
      cut.label += " cut@" + std::to_string(n);
      out.push_back(cut);
    }
  }
  return out;
}

TEST(ChatStreaming, SplitAtEveryByte) {
  for (const auto& s : sample_outputs()) {
    const ParsedMessage want = parse_chat_output(s.format, s.text, s.opts);
    for (size_t k = 0; k <= s.text.size(); ++k) {
      expect_same(run(s.format, s.opts, {s.text.substr(0, k), s.text.substr(k)}), want,
                  s.label + " split@" + std::to_string(k));
    }
  }
}

TEST(ChatStreaming, OneByteAtATimeIncludingTruncations) {
  for (const auto& s : samples_and_cuts()) {
    const ParsedMessage want = parse_chat_output(s.format, s.text, s.opts);
    std::vector<std::string> bytes;
    for (char c : s.text) bytes.emplace_back(1, c);
    StreamingChatParser kept({}, {});
    expect_same(run(s.format, s.opts, bytes, nullptr, &kept), want, s.label + " bytewise");
    EXPECT_EQ(kept.message().content, want.content) << s.label;
    EXPECT_EQ(kept.message().tool_calls.size(), want.tool_calls.size()) << s.label;
  }
}

TEST(ChatStreaming, RandomChunks) {
  std::mt19937 rng(1234);
  for (const auto& s : samples_and_cuts()) {
    const ParsedMessage want = parse_chat_output(s.format, s.text, s.opts);
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<std::string> chunks;
      for (size_t i = 0; i < s.text.size();) {
        const size_t n = 1 + rng() % 9;
        chunks.push_back(s.text.substr(i, n));
        i += n;
      }
      expect_same(run(s.format, s.opts, chunks), want, s.label + " random");
    }
  }
}

// Text that cannot start a marker is emitted at once, not at finish().
// A call of a function the request did not offer never starts a streamed call: its text
// comes out as content, the same the one-shot parse gives, one byte at a time too.
TEST(ChatStreaming, AnUnofferedCallStreamsAsContent) {
  const ChatFormat hermes{ToolCallFormat::Hermes, ReasoningFormat::None};
  const std::string text = "Sure.\n<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>";
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  for (const auto& chunks : {std::vector<std::string>{text}, bytes}) {
    const Reassembled r = run(hermes, testing::offering({"get_weather"}), chunks);
    EXPECT_EQ(r.content, text);
    EXPECT_TRUE(r.calls.empty());
  }
}

TEST(ChatStreaming, ContentIsNotHeldBack) {
  StreamingChatParser p({ToolCallFormat::Hermes, ReasoningFormat::Think}, with_tools());
  std::string got;
  for (const auto& d : p.push("<think>Planning")) got += d.text;
  EXPECT_EQ(got, "Planning");
  got.clear();
  for (const auto& d : p.push(" more</think>Answer <tool_")) {
    if (d.kind == ChatDelta::Kind::Content) got += d.text;
  }
  EXPECT_EQ(got, "Answer");  // " <tool_" may be a call's start: held back
  got.clear();
  for (const auto& d : p.push("x")) got += d.text;
  EXPECT_EQ(got, " <tool_x");
  auto ds = p.push("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>");
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].kind, ChatDelta::Kind::ToolCallStart);
  EXPECT_EQ(ds[0].name, "f");
  EXPECT_EQ(ds[1].text, "{\"a\": 1}");
  EXPECT_TRUE(p.finish().empty());
  EXPECT_EQ(p.message().content, "Answer <tool_x");
}

TEST(ChatStreaming, GptOssReasoningStreams) {
  StreamingChatParser p({ToolCallFormat::GptOss, ReasoningFormat::GptOss}, with_tools());
  std::string reasoning;
  for (const auto& d : p.push("<|channel|>analysis<|message|>Thinking hard<|e")) reasoning += d.text;
  EXPECT_EQ(reasoning, "Thinking hard");
}

}  // namespace
}  // namespace pagoda::chat
