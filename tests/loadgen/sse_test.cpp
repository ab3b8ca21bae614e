// SseParser on split, merged and malformed input; StreamAccumulator on the
// OpenAI chunk shapes.
#include "loadgen/sse.h"

#include <gtest/gtest.h>

namespace pagoda::loadgen {
namespace {

std::vector<std::string> parse_all(std::string_view bytes) {
  SseParser p;
  std::vector<std::string> events;
  p.feed(bytes, events);
  return events;
}

TEST(BenchSseParser, MergedEventsInOneFeedAreAllReturned) {
  EXPECT_EQ(parse_all("data: a\n\ndata: b\n\ndata: [DONE]\n\n"),
            (std::vector<std::string>{"a", "b", "[DONE]"}));
}

TEST(BenchSseParser, EverySplitPointGivesTheSameEvents) {
  const std::string stream =
      "data: {\"x\":1}\r\n\r\n: comment\n\nevent: message\ndata: line1\ndata: line2\n\n"
      "data:nospace\r\rdata: [DONE]\r\n\r\n";
  const std::vector<std::string> expected = {"{\"x\":1}", "line1\nline2", "nospace", "[DONE]"};
  ASSERT_EQ(parse_all(stream), expected);
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p;
    std::vector<std::string> events;
    p.feed(std::string_view(stream).substr(0, cut), events);
    p.feed(std::string_view(stream).substr(cut), events);
    EXPECT_EQ(events, expected) << "cut at " << cut;
  }
  SseParser p;  // one byte at a time
  std::vector<std::string> events;
  for (char c : stream) p.feed(std::string_view(&c, 1), events);
  EXPECT_EQ(events, expected);
}

TEST(BenchSseParser, IdRetryAndUnknownFieldsAreIgnored) {
  EXPECT_EQ(parse_all("id: 7\nretry: 100\nfoo\ndata: x\n\n"), (std::vector<std::string>{"x"}));
}

TEST(BenchSseParser, AnEventWithoutDataIsNotDispatched) {
  EXPECT_TRUE(parse_all("event: ping\n\n\n\n").empty());
}

TEST(BenchSseParser, UnterminatedEventIsHeldAndReportedPartial) {
  SseParser p;
  std::vector<std::string> events;
  p.feed("data: a\n\ndata: half", events);
  EXPECT_EQ(events, (std::vector<std::string>{"a"}));
  EXPECT_TRUE(p.has_partial());
  p.feed("\n\n", events);
  EXPECT_EQ(events.size(), 2u);
  EXPECT_FALSE(p.has_partial());
}

TEST(BenchSseParser, AnOversizedEventFailsInsteadOfGrowing) {
  SseParser p;
  std::vector<std::string> events;
  std::string big(SseParser::kMaxEventBytes / 4, 'x');
  p.feed("data: ", events);
  for (int i = 0; i < 5 && !p.failed(); ++i) p.feed(big, events);
  EXPECT_TRUE(p.failed());
  p.feed("\n\ndata: y\n\n", events);
  EXPECT_TRUE(events.empty());
}

TEST(BenchStreamAccumulator, ChatChunksContentUsageAndDone) {
  StreamAccumulator acc;
  bool content = false;
  using S = StreamAccumulator::Status;
  EXPECT_EQ(acc.on_event(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})", &content), S::kContinue);
  EXPECT_FALSE(content);  // the role chunk carries no content
  EXPECT_EQ(acc.on_event(R"({"choices":[{"index":0,"delta":{"content":"Hel"}}],"usage":null})", &content), S::kContinue);
  EXPECT_TRUE(content);
  EXPECT_EQ(acc.on_event(R"({"choices":[{"index":0,"delta":{"content":"lo"}}]})", &content), S::kContinue);
  EXPECT_EQ(acc.on_event(R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})", &content), S::kContinue);
  EXPECT_FALSE(content);
  EXPECT_FALSE(acc.has_usage());
  EXPECT_EQ(acc.on_event(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}})", &content), S::kContinue);
  EXPECT_EQ(acc.on_event("[DONE]", &content), S::kDone);
  EXPECT_EQ(acc.text(), "Hello");
  EXPECT_EQ(acc.num_content_chunks(), 2);
  EXPECT_EQ(acc.finish_reason(), "length");
  EXPECT_TRUE(acc.has_usage());
  EXPECT_EQ(acc.prompt_tokens(), 12);
  EXPECT_EQ(acc.completion_tokens(), 2);
  EXPECT_EQ(acc.cached_tokens(), 8);
  EXPECT_TRUE(acc.done());
}

TEST(BenchStreamAccumulator, CompletionsTextChunksAndUsageWithoutCachedTokens) {
  StreamAccumulator acc;
  bool content = false;
  acc.on_event(R"({"object":"text_completion","choices":[{"index":0,"text":" a"}]})", &content);
  EXPECT_TRUE(content);
  acc.on_event(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}})", &content);
  EXPECT_EQ(acc.text(), " a");
  EXPECT_EQ(acc.cached_tokens(), -1);  // the server did not say
}

TEST(BenchStreamAccumulator, MalformedDataIsReported) {
  using S = StreamAccumulator::Status;
  for (const char* bad : {"{not json", "[1,2]", "42", "{\"id\":\"x\"}", "{\"choices\":[7]}"}) {
    StreamAccumulator acc;
    bool content = false;
    EXPECT_EQ(acc.on_event(bad, &content), S::kMalformed) << bad;
    EXPECT_FALSE(acc.detail().empty());
  }
}

TEST(BenchStreamAccumulator, ErrorObjectIsAServerError) {
  StreamAccumulator acc;
  bool content = false;
  EXPECT_EQ(acc.on_event(R"({"error":{"message":"out of memory"}})", &content), StreamAccumulator::Status::kServerError);
  EXPECT_EQ(acc.detail(), "out of memory");
}

}  // namespace
}  // namespace pagoda::loadgen
