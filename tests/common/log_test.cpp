// common/log.h: the timestamp, the text and JSON line formats, escaping of hostile text
// (quotes, newlines, control bytes, invalid UTF-8, terminal controls) so one event stays
// one line, value truncation, Debug lines only when verbose, and the file output
// (appending, concurrent writers, a path that cannot be opened).
#include "common/log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/utf8.h"
#include "temp_dir.h"

namespace pagoda {
namespace {

using nlohmann::json;
using Clock = std::chrono::system_clock;

// 2026-12-04T22:31:33.123Z
const Clock::time_point kAt = Clock::time_point(std::chrono::milliseconds(1796423493123LL));

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line)) out.push_back(line);
  return out;
}

// Every way a string can try to break a line or a JSON object.
const std::string kHostile = std::string("say \"hi\"\\ then\nINFO [x] GET / 200\r\tbell\x07 nul") + '\0' +
                             " esc\x1b[31m del\x7f bad\xff\xc3( nel\xc2\x85 ls\xe2\x80\xa8 caf\xc3\xa9";

TEST(LogTimestamp, IsIso8601UtcWithMilliseconds) {
  EXPECT_EQ(format_log_timestamp(kAt), "2026-12-04T22:31:33.123Z");
  EXPECT_EQ(format_log_timestamp(Clock::time_point{}), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(format_log_timestamp(Clock::time_point(std::chrono::milliseconds(-1))), "1969-12-31T23:59:59.999Z");
}

TEST(LogText, HeadWordsMessageAndFields) {
  LogLine line(LogLevel::Warn, kAt);
  line.head("method", "POST").head("path", "/v1/chat/completions").head("status", int64_t{400});
  line.add("request_id", "req_1").add("duration_ms", 2.849, 1).add("stream", false).add("reason", "the model 'x' does not exist");
  EXPECT_EQ(line.format(LogFormat::Text, "replica", "r1"),
            "2026-12-04T22:31:33.123Z WARN [r1] POST /v1/chat/completions 400 request_id=req_1 duration_ms=2.8 "
            "stream=false reason=\"the model 'x' does not exist\"");
  EXPECT_EQ(LogLine(LogLevel::Info, kAt).message("pagoda serve: ready").format(LogFormat::Text),
            "2026-12-04T22:31:33.123Z INFO pagoda serve: ready");
}

TEST(LogText, QuotesOnlyWhatNeedsIt) {
  LogLine line(LogLevel::Info, kAt);
  line.add("a", "plain-value/x:1").add("b", "").add("c", "has=sign").add("d", "caf\xc3\xa9");
  EXPECT_EQ(line.format(LogFormat::Text), "2026-12-04T22:31:33.123Z INFO a=plain-value/x:1 b=\"\" c=\"has=sign\" d=caf\xc3\xa9");
}

TEST(LogText, HostileTextStaysOnOneLineAndEscaped) {
  LogLine line(LogLevel::Error, kAt);
  line.head("path", kHostile).message(kHostile).add("reason", kHostile);
  const std::string text = line.format(LogFormat::Text, "replica", "r1");
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  for (char c : text) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7f) << text;
  EXPECT_EQ(text.find("\xc2\x85"), std::string::npos) << "C1 controls escaped";
  EXPECT_EQ(text.find("\xe2\x80\xa8"), std::string::npos) << "line separators escaped";
  EXPECT_TRUE(is_valid_utf8(text));
  const std::string quoted =
      "\"say \\\"hi\\\"\\\\ then\\nINFO [x] GET / 200\\r\\tbell\\x07 nul\\x00 esc\\x1b[31m del\\x7f bad\xef\xbf\xbd"
      "\xef\xbf\xbd( nel\\u0085 ls\\u2028 caf\xc3\xa9\"";
  EXPECT_NE(text.find(" reason=" + quoted), std::string::npos) << text;
  EXPECT_NE(text.find("ERROR [r1] " + quoted + " say \"hi\"\\ then\\nINFO"), std::string::npos)
      << "the path is quoted; the message only has its controls escaped\n" << text;
}

TEST(LogJson, OneObjectPerLineWithTypedValues) {
  LogLine line(LogLevel::Info, kAt);
  line.head("method", "GET").head("status", int64_t{200}).message("hello");
  line.add("duration_ms", 12.345, 2).add("tokens", int64_t{42}).add("stream", true).add("nan", std::nan(""), 1);
  const std::string text = line.format(LogFormat::Json, "replica", "r1");
  EXPECT_EQ(text,
            "{\"ts\":\"2026-12-04T22:31:33.123Z\",\"level\":\"info\",\"replica\":\"r1\",\"method\":\"GET\","
            "\"status\":200,\"msg\":\"hello\",\"duration_ms\":12.35,\"tokens\":42,\"stream\":true,\"nan\":null}");
  const json j = json::parse(text);
  EXPECT_EQ(j["status"], 200);
  EXPECT_DOUBLE_EQ(j["duration_ms"].get<double>(), 12.35);
}

TEST(LogJson, HostileTextParsesBackOnOneLine) {
  LogLine line(LogLevel::Warn, kAt);
  line.head("path", kHostile).message(kHostile).add("reason", kHostile).add(kHostile, "key too");
  const std::string text = line.format(LogFormat::Json, "replica", "r\"1\n");
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  for (char c : text) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20) << text;
  const json j = json::parse(text);  // throws on invalid JSON or invalid UTF-8
  // Well-formed text round-trips exactly; each ill-formed byte sequence is one U+FFFD.
  std::string expected = kHostile;
  expected.replace(expected.find("\xff\xc3("), 3, "\xef\xbf\xbd\xef\xbf\xbd(");
  EXPECT_EQ(j["path"], expected);
  EXPECT_EQ(j["msg"], expected);
  EXPECT_EQ(j["reason"], expected);
  EXPECT_EQ(j[expected], "key too");
  EXPECT_EQ(j["replica"], "r\"1\n");
  EXPECT_EQ(j["level"], "warn");
}

TEST(LogValues, LongValuesAreCutOnACharacterBoundary) {
  std::string long_text;
  while (long_text.size() < 3 * kMaxLogValueBytes) long_text += "\xc3\xa9";  // é, two bytes each
  const std::string cut = truncate_for_log(long_text, 101);
  EXPECT_LE(cut.size(), 101u);
  EXPECT_EQ(cut.substr(cut.size() - 3), "\xe2\x80\xa6");
  EXPECT_EQ(cut.size(), 98u + 3u) << "49 whole characters, then the ellipsis";
  EXPECT_EQ(truncate_for_log("short", 101), "short");
  EXPECT_EQ(truncate_for_log("abcdef", 2), "ab") << "no room for the marker";

  const json j = json::parse(LogLine(LogLevel::Info, kAt).add("reason", long_text).format(LogFormat::Json));
  EXPECT_LE(j["reason"].get<std::string>().size(), kMaxLogValueBytes);
}

TEST(Logger, DebugLinesOnlyWhenVerbose) {
  test::TempDir dir("pagoda_log_test");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/serve.log";
  Logger log;
  log.open_file(path);
  log.set_tag("replica", "r1");
  log.write(LogLevel::Debug, "hidden");
  log.write(LogLevel::Info, "shown");
  log.set_verbose(true);
  EXPECT_TRUE(log.enabled(LogLevel::Debug));
  log.write(LogLevel::Debug, "now shown");
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(" INFO [r1] shown"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(" DEBUG [r1] now shown"), std::string::npos) << lines[1];
}

TEST(Logger, AppendsToAnExistingFile) {
  test::TempDir dir("pagoda_log_test");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/serve.log";
  std::ofstream(path) << "earlier line\n";
  Logger log;
  log.set_format(LogFormat::Json);
  log.open_file(path);
  log.write(LogLevel::Info, "next");
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "earlier line");
  EXPECT_EQ(json::parse(lines[1])["msg"], "next");
}

TEST(Logger, APathThatCannotBeOpenedIsAnErrorNamingIt) {
  test::TempDir dir("pagoda_log_test");
  std::filesystem::create_directories(dir.path);
  Logger log;
  try {
    log.open_file(dir.path);  // a directory
    FAIL() << "opened a directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Is a directory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(log.open_file(dir.path + "/missing/dir/serve.log"), Error);
}

TEST(Logger, ConcurrentWritersNeverInterleaveLines) {
  test::TempDir dir("pagoda_log_test");
  std::filesystem::create_directories(dir.path);
  const std::string path = dir.path + "/serve.log";
  Logger log;
  log.set_format(LogFormat::Json);
  log.open_file(path);
  constexpr int kThreads = 4, kLines = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&log, t] {
      for (int i = 0; i < kLines; ++i)
        log.write(LogLine(LogLevel::Info).add("thread", int64_t{t}).add("i", int64_t{i}).add("pad", std::string(300, 'x')));
    });
  for (std::thread& th : threads) th.join();
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  std::vector<int> next(kThreads, 0);
  for (const std::string& line : lines) {
    const json j = json::parse(line);
    const int t = j["thread"].get<int>();
    EXPECT_EQ(j["i"].get<int>(), next[t]++) << "each thread's lines in its order";
  }
}

}  // namespace
}  // namespace pagoda
