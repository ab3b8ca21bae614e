// The habits llama-server users bring (#32), through the binary: its short flags with the
// same meaning (-np, -a, -ctk / -ctv with llama.cpp's type names, -n, --chat-template
// NAME|FILE, -hf, --version), a mistyped flag answered with one line and a hint instead
// of 90 lines of help, and a request naming another model ("gpt-4o") served by the
// loaded one with a log line, unless --strict-model-names.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::HttpResult;
using pagoda::testing::ServerProcess;
using pagoda::testing::http;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

struct CommandRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

CommandRun run(const std::string& args, const std::string& env = "") {
  CommandRun r;
  const std::string cmd = env + " " + std::string(PAGODA_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(LlamaServerHabits, VersionAndOneLineFlagErrors) {
  for (const char* args : {"--version", "serve --version"}) {
    const CommandRun r = run(args);
    EXPECT_EQ(r.status, 0) << args;
    EXPECT_EQ(r.out.rfind("pagoda ", 0), 0u) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
  }
  const CommandRun typo = run("serve -m " + kStories + " --prot 1");
  EXPECT_EQ(typo.status, 2);
  EXPECT_EQ(lines(typo.out), 1) << typo.out;
  EXPECT_NE(typo.out.find("--prot"), std::string::npos) << typo.out;
  EXPECT_NE(typo.out.find("see 'pagoda serve --help'"), std::string::npos) << typo.out;
  const CommandRun no_model = run("serve");
  EXPECT_NE(no_model.status, 0);
  EXPECT_EQ(lines(no_model.out), 1) << no_model.out;
  const CommandRun bad_template = run("serve -m " + kStories + " --chat-template no-such-template");
  EXPECT_EQ(bad_template.status, 1);
  EXPECT_NE(bad_template.out.find("neither a file nor a built-in template (chatml, llama3, gemma, phi3, gpt-oss)"),
            std::string::npos)
      << bad_template.out;
  // -hf is -m hf://...: offline and not cached, the error names the repository.
  const CommandRun hf = run("serve -hf nobody/nothing:Q4_0", "HF_HUB_OFFLINE=1 HF_HOME=/tmp/pagoda_no_hf_home");
  EXPECT_EQ(hf.status, 1);
  EXPECT_NE(hf.out.find("nobody/nothing is not in the cache"), std::string::npos) << hf.out;
}

TEST(LlamaServerHabits, ShortFlagsMeanWhatTheyMeanInLlamaServer) {
  ServerProcess s({"-m", kStories, "-t", "1", "-np", "2", "-ctk", "q8_0", "-ctv", "q4_0", "-a", "my-model", "-n",
                   "5", "--chat-template", "llama3"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  const std::string log = s.log();
  EXPECT_NE(log.find("model my-model"), std::string::npos) << log;
  EXPECT_NE(log.find("K q8, V q4"), std::string::npos) << log;
  EXPECT_NE(log.find("parallel 2,"), std::string::npos) << log;
  EXPECT_NE(log.find("chat template: llama3"), std::string::npos) << log;
  const json messages = json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}});
  // -n: a request that gives no max_tokens generates 5.
  const HttpResult chat = http(port, "POST", "/v1/chat/completions", json{{"messages", messages}}.dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(json::parse(chat.body)["usage"]["completion_tokens"], 5) << chat.body;
  const HttpResult tmpl = http(port, "POST", "/apply-template", json{{"messages", messages}}.dump());
  ASSERT_EQ(tmpl.status, 200) << tmpl.body;
  EXPECT_NE(json::parse(tmpl.body)["prompt"].get<std::string>().find(
                "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"),
            std::string::npos)
      << tmpl.body;
}

TEST(LlamaServerHabits, AnotherModelNameIsServedUnlessStrict) {
  ServerProcess s({"-m", kStories, "-t", "1"});
  const uint16_t port = s.start();
  ASSERT_NE(port, 0) << s.log();
  const std::string body = json{{"model", "gpt-4o"}, {"prompt", "Once"}, {"max_tokens", 2}}.dump();
  for (int i = 0; i < 3; ++i) {
    const HttpResult r = http(port, "POST", "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["model"], "stories260K.gguf");
  }
  const std::string log = s.log();
  const std::string line = "a request names the model \"gpt-4o\": serving it with 'stories260K.gguf'";
  ASSERT_NE(log.find(line), std::string::npos) << log;
  EXPECT_EQ(log.find(line, log.find(line) + 1), std::string::npos) << "logged more than once:\n" << log;

  ServerProcess strict({"-m", kStories, "-t", "1", "--strict-model-names"});
  const uint16_t sp = strict.start();
  ASSERT_NE(sp, 0) << strict.log();
  const HttpResult r = http(sp, "POST", "/v1/completions", body);
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_NE(r.body.find("the model 'gpt-4o' does not exist"), std::string::npos) << r.body;
}

}  // namespace
