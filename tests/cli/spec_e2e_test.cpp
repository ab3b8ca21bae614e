// Speculative decoding through `pagoda serve` with its default flags: a completion sent a
// second time is answered from proposals (the suffix index) with the text of a server
// without speculation; a fresh one too; the counters reach /v1/cache/stats, /metrics and
// the request's log line; a request can opt out; bad flags are one-line errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "server_process.h"

namespace pagoda {
namespace {

using json = nlohmann::json;
using testing::http;
using testing::ServerProcess;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

std::string complete(uint16_t port, const std::string& prompt, bool speculative = true) {
  json body{{"prompt", prompt}, {"max_tokens", 120}, {"temperature", 0}, {"ignore_eos", true}};
  if (!speculative) body["speculative"] = false;
  const auto r = http(port, "POST", "/v1/completions", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return {};
  return json::parse(r.body)["choices"][0]["text"].get<std::string>();
}

json speculation(uint16_t port) {
  const auto r = http(port, "GET", "/v1/cache/stats");
  EXPECT_EQ(r.status, 200);
  return json::parse(r.body)["speculation"];
}

TEST(SpecE2E, ARepeatedCompletionIsAnsweredFromProposalsWithTheSameText) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  const std::string first_prompt = "Once upon a time, there was a little girl named Lily.";
  const std::string fresh_prompt = "Tom had a big red ball. He liked to";
  std::string want_first, want_fresh;
  {
    ServerProcess off({"-m", kStories, "--threads", "1", "--spec-type", "none", "--no-log-requests"});
    const uint16_t port = off.start();
    ASSERT_NE(port, 0) << off.log();
    want_first = complete(port, first_prompt);
    want_fresh = complete(port, fresh_prompt);
    EXPECT_EQ(speculation(port)["types"], "none");
    EXPECT_EQ(speculation(port)["draft_tokens"], 0);
  }
  // The defaults (suffix,ngram), planned at a fixed cost ratio (the planner's prior): with
  // the measured one, a step timed on a machine busy with other tests proposed less, and
  // 77 of 120 tokens were accepted once under ctest -j2.
  ServerProcess on({"-m", kStories, "--threads", "1", "--spec-cost-ratio", "0.15"});
  const uint16_t port = on.start();
  ASSERT_NE(port, 0) << on.log();
  EXPECT_NE(on.log().find("speculative decoding: suffix,ngram"), std::string::npos) << on.log();
  EXPECT_EQ(complete(port, first_prompt), want_first);
  const json after_first = speculation(port);
  EXPECT_EQ(complete(port, first_prompt), want_first);  // the second time
  const json after_second = speculation(port);
  const int64_t accepted = after_second["accepted_tokens"].get<int64_t>() - after_first["accepted_tokens"].get<int64_t>();
  EXPECT_GE(accepted, 100) << after_second.dump();  // of 120 tokens
  EXPECT_GT(after_second["suffix_index"]["bytes"].get<int64_t>(), 0);
  EXPECT_LE(after_second["suffix_index"]["bytes"], after_second["suffix_index"]["capacity_bytes"]);
  EXPECT_EQ(complete(port, fresh_prompt), want_fresh);
  // Opted out: nothing proposed for it.
  const json before_opt_out = speculation(port);
  EXPECT_EQ(complete(port, first_prompt, false), want_first);
  EXPECT_EQ(speculation(port)["draft_tokens"], before_opt_out["draft_tokens"]);
  const auto m = http(port, "GET", "/metrics");
  EXPECT_NE(m.body.find("pagoda_spec_accepted_tokens_total"), std::string::npos);
  EXPECT_NE(m.body.find("pagoda_spec_acceptance_rate"), std::string::npos);
  EXPECT_NE(on.log().find("accepted_tokens="), std::string::npos) << on.log();
}

TEST(SpecE2E, BadFlagsAreOneLineErrors) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--spec-type", "eagle"}, "unknown type 'eagle'"},
      {{"--spec-type", "suffix,none"}, "'none' cannot be combined"},
      {{"--spec-type", "mtp"}, "not built yet"},
      {{"--spec-type", "draft"}, "needs a draft model"},
      {{"-md", "/nonexistent/draft.gguf"}, "/nonexistent/draft.gguf"},
      {{"--draft-min", "9", "--draft-max", "4"}, "--draft-min (9) must not exceed --draft-max (4)"},
      {{"--spec-suffix-bytes", "lots"}, "--spec-suffix-bytes"},
      {{"--spec-cost-ratio", "-1"}, "--spec-cost-ratio"},
      {{"--spec-cost-ratio", "cheap"}, "--spec-cost-ratio"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"-m", kStories};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    ServerProcess s(args);
    EXPECT_EQ(s.start(), 0) << c.says;
    EXPECT_NE(s.log().find(c.says), std::string::npos) << s.log();
  }
}

}  // namespace
}  // namespace pagoda
