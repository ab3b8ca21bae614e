// `pagoda chat` through the binary, its standard input a pipe (#32): every message gets
// one answer (a `"""` block and a `\`-continued line each count as one message), the
// second turn is served from the prefix cache, /clear starts again from the system
// prompt, a failing template or a conversation past the context keeps the chat going,
// and Ctrl-C stops an answer without ending the chat.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace {

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

// `pagoda chat ARGS` with pipes on stdin, stdout and stderr.
class ChatProcess {
 public:
  explicit ChatProcess(const std::vector<std::string>& args) {
    int in[2], out[2], err[2];
    EXPECT_EQ(::pipe(in), 0);
    EXPECT_EQ(::pipe(out), 0);
    EXPECT_EQ(::pipe(err), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
      std::vector<std::string> all = {PAGODA_BINARY, "chat"};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(PAGODA_BINARY, argv.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    in_ = in[1];
    out_ = out[0];
    err_ = err[0];
    ::fcntl(out_, F_SETFL, O_NONBLOCK);
    ::fcntl(err_, F_SETFL, O_NONBLOCK);
  }
  ~ChatProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (int fd : {in_, out_, err_})
      if (fd >= 0) ::close(fd);
  }
  void send(const std::string& text) { ASSERT_EQ(::write(in_, text.data(), text.size()), static_cast<ssize_t>(text.size())); }
  void close_input() {
    ::close(in_);
    in_ = -1;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  // Reads what is there into out / err.
  void drain() {
    char buf[4096];
    for (auto [fd, s] : {std::pair{out_, &out}, std::pair{err_, &err}}) {
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) s->append(buf, static_cast<size_t>(n));
    }
  }
  // Waits until `pred` holds (reading as output comes), up to timeout_s.
  bool wait_until(const std::function<bool()>& pred, double timeout_s = 60) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    for (;;) {
      drain();
      if (pred()) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  int wait_exit(double timeout_s = 60) {
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        drain();
        return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
      }
      drain();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  std::string out, err;

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  bool exited_ = false;
};

// The "[prompt N tokens, C from the cache; ...]" lines, as (N, C).
std::vector<std::pair<int, int>> turn_stats(const std::string& err) {
  std::vector<std::pair<int, int>> out;
  const std::regex re("\\[prompt (\\d+) tokens, (\\d+) from the cache");
  for (auto it = std::sregex_iterator(err.begin(), err.end(), re); it != std::sregex_iterator(); ++it)
    out.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
  return out;
}

TEST(Chat, EachMessageOneAnswerTheSecondTurnFromTheCache) {
  ChatProcess c({"-m", kStories, "-t", "1", "-n", "16", "--temp", "0", "-s", "You tell short stories."});
  c.send("Once upon a time\n");
  c.send("\"\"\"\nThere was a dog.\nIt liked to run.\n\"\"\"\n");
  c.send("A cat \\\nsat down.\n");
  c.send("/clear\n");
  c.send("Hello\n");
  c.send("/bye\n");
  EXPECT_EQ(c.wait_exit(), 0) << c.err;
  const auto stats = turn_stats(c.err);
  ASSERT_EQ(stats.size(), 4u) << c.err;  // four messages, four answers
  // Turn 2 extends turn 1's conversation: its prompt before the new message is cached.
  EXPECT_GT(stats[1].second, stats[0].first) << c.err;
  EXPECT_GT(stats[2].second, stats[1].first) << c.err;
  // After /clear the system prompt alone is shared.
  EXPECT_LT(stats[3].second, stats[0].first) << c.err;
  EXPECT_GT(stats[3].second, 0) << c.err;
  EXPECT_NE(c.out.find("(a new conversation)"), std::string::npos) << c.out;
}

TEST(Chat, ALongConversationPastTheContextSaysSoAndTheChatGoesOn) {
  ChatProcess c({"-m", kStories, "-t", "1", "-n", "8", "-c", "64", "--temp", "0"});
  c.send(std::string(400, 'a') + "\n");  // over 64 tokens
  c.send("Hi\n");
  c.close_input();  // end of input ends the chat
  EXPECT_EQ(c.wait_exit(), 0) << c.err;
  EXPECT_NE(c.err.find("(/clear starts a new conversation)"), std::string::npos) << c.err;
  EXPECT_EQ(turn_stats(c.err).size(), 1u) << c.err;  // "Hi" was answered
}

TEST(Chat, CtrlCStopsAnAnswerAndTheChatGoesOn) {
  // An answer that would run for tens of seconds.
  ChatProcess c({"-m", kStories, "-t", "1", "-n", "60000", "-c", "65536", "--ignore-eos", "--kv-cache-bytes", "64MiB"});
  c.send("Once upon a time\n");
  ASSERT_TRUE(c.wait_until([&] { return c.out.size() > 200; })) << c.err;
  c.signal(SIGINT);
  ASSERT_TRUE(c.wait_until([&] { return c.err.find("; stopped]") != std::string::npos; }, 10)) << c.err;
  c.send("/bye\n");
  EXPECT_EQ(c.wait_exit(10), 0) << c.err;
}

}  // namespace
