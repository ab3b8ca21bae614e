// scripts/cluster.sh end to end: three `pagoda serve` replicas of stories260K (one thread
// each) behind HAProxy (deploy/haproxy/), on loopback. Conversations carry no cache key, so
// the affinity configuration has to keep each one on one replica by hashing its start; the
// prefix cache's hits (usage.prompt_tokens_details.cached_tokens) show where each turn went,
// and the X-Pagoda-Server header HAProxy adds names the replica. Round-robin is the control;
// a replica killed mid-request, a draining replica and a busy one must cost no request.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server_process.h"

namespace {

using nlohmann::json;
using pagoda::testing::http;
using pagoda::testing::HttpResult;

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
constexpr int kReplicas = 3;
constexpr int kConversations = 6;
constexpr int kTurns = 4;

std::string haproxy_path() {
  for (const char* p : {"/usr/sbin/haproxy", "/usr/bin/haproxy", "/usr/local/sbin/haproxy"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

// A port nothing listens on now (the kernel's pick for port 0).
uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// scripts/cluster.sh as a child in its own process group (so a hung run can be killed whole).
class Cluster {
 public:
  struct Replica {
    uint16_t port = 0;
    pid_t pid = -1;
  };

  Cluster(const std::string& balance, const std::vector<std::string>& serve_args = {}) {
    port_ = free_port();
    log_path_ = "/tmp/pagoda_cluster_test_" + std::to_string(::getpid()) + "_" + std::to_string(port_) + ".log";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("PAGODA_BIN", PAGODA_BINARY, 1);
      std::vector<std::string> all = {"/bin/bash", std::string(PAGODA_SOURCE_DIR) + "/scripts/cluster.sh",
                                      "--replicas", std::to_string(kReplicas),
                                      "--port", std::to_string(port_),
                                      "--balance", balance,
                                      "-m", kStories, "--",
                                      "-t", "1", "--kv-cache-bytes", "16MiB"};
      all.insert(all.end(), serve_args.begin(), serve_args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv("/bin/bash", argv.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
  }
  ~Cluster() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      if (!wait_exit(20)) {
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
      }
    }
    ::unlink(log_path_.c_str());
  }

  std::string log() const {
    std::ifstream f(log_path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // Waits for cluster.sh's ready line and reads the replicas' ports and pids.
  bool start(double timeout_s = 60) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string l = log();
      if (l.find("cluster.sh: ready:") != std::string::npos) {
        std::istringstream in(l);
        std::string line;
        while (std::getline(in, line)) {
          char name[16] = {};
          unsigned port = 0;
          int pid = 0;
          if (std::sscanf(line.c_str(), "cluster.sh: replica %15s on http://127.0.0.1:%u pid %d", name, &port, &pid) == 3)
            replicas_[name] = Replica{static_cast<uint16_t>(port), pid};
        }
        return replicas_.size() == kReplicas;
      }
      if (exited()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  bool exited() { return ::waitpid(pid_, &status_, WNOHANG) == pid_ ? (pid_ = -1, true) : pid_ < 0; }
  bool wait_exit(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      if (exited()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  uint16_t port() const { return port_; }
  const Replica& replica(const std::string& name) const { return replicas_.at(name); }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  uint16_t port_ = 0;
  std::string log_path_;
  std::map<std::string, Replica> replicas_;
};

// A started cluster, or null. The port is picked free and then bound by HAProxy a moment later,
// so another process can take it in between (tests running in parallel): then it tries again.
std::unique_ptr<Cluster> start_cluster(const std::string& balance, const std::vector<std::string>& serve_args = {}) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto cluster = std::make_unique<Cluster>(balance, serve_args);
    if (cluster->start()) return cluster;
    if (cluster->log().find("haproxy exited during start-up") == std::string::npos) {
      ADD_FAILURE() << cluster->log();
      return nullptr;
    }
  }
  ADD_FAILURE() << "HAProxy could not bind three times";
  return nullptr;
}

// One chat turn's outcome.
struct Turn {
  int status = 0;
  std::string server;  // X-Pagoda-Server: the replica that answered
  int64_t prompt_tokens = 0, cached_tokens = 0;
  std::string answer;
  std::string error;  // the body when not 200
  bool hit() const { return status == 200 && 2 * cached_tokens > prompt_tokens; }
};

// A conversation without any cache key: system prompt, then user / assistant turns.
struct Conversation {
  json messages;
  std::vector<Turn> turns;
  explicit Conversation(int idx) {
    static const char* kAnimals[] = {"cat", "dog", "bird", "fish", "frog", "bear"};
    messages = json::array({{{"role", "system"}, {"content", "You tell short stories to children."}}});
    user(std::string("Tell me a story about a little ") + kAnimals[idx % 6] + " who found a red ball.");
  }
  void user(const std::string& text) { messages.push_back({{"role", "user"}, {"content", text}}); }
  // Sends the history, records the turn and appends the answer and the next user message.
  const Turn& step(uint16_t port, int max_tokens = 16) {
    json body{{"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0}};
    if (max_tokens > 16) body["ignore_eos"] = true;
    HttpResult r = http(port, "POST", "/v1/chat/completions", body.dump());
    Turn t;
    t.status = r.status;
    t.server = r.headers["x-pagoda-server"];
    json j = json::parse(r.body, nullptr, false);
    if (r.status == 200 && j.is_object()) {
      t.prompt_tokens = j["usage"]["prompt_tokens"];
      t.cached_tokens = j["usage"]["prompt_tokens_details"]["cached_tokens"];
      t.answer = j["choices"][0]["message"]["content"];
      messages.push_back({{"role", "assistant"}, {"content", t.answer}});
      user("And then what happened next, in turn " + std::to_string(turns.size() + 2) + "?");
    } else {
      t.error = r.body;
    }
    turns.push_back(t);
    return turns.back();
  }
};

std::string describe(const std::vector<Conversation>& convs) {
  std::string s;
  for (size_t c = 0; c < convs.size(); ++c) {
    s += "conversation " + std::to_string(c) + ":";
    for (const Turn& t : convs[c].turns)
      s += " [" + std::to_string(t.status) + " " + t.server + " cached " + std::to_string(t.cached_tokens) + "/" +
           std::to_string(t.prompt_tokens) + (t.error.empty() ? "" : " " + t.error) + "]";
    s += "\n";
  }
  return s;
}

// Runs one turn of every conversation at once (one thread each).
void turn_of_all(std::vector<Conversation>& convs, uint16_t port) {
  std::vector<std::thread> threads;
  for (Conversation& c : convs) threads.emplace_back([&c, port] { c.step(port); });
  for (std::thread& t : threads) t.join();
}

class ClusterE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (haproxy_path().empty()) FAIL() << "haproxy is not installed (scripts/install-deps.sh installs it)";
  }
};

TEST_F(ClusterE2E, AffinityKeepsEveryConversationWithoutAKeyOnOneReplica) {
  std::unique_ptr<Cluster> owner = start_cluster("affinity");
  ASSERT_TRUE(owner);
  Cluster& cluster = *owner;
  std::vector<Conversation> convs;
  for (int c = 0; c < kConversations; ++c) convs.emplace_back(c);
  for (int t = 0; t < kTurns; ++t) turn_of_all(convs, cluster.port());

  std::set<std::string> used;
  for (const Conversation& c : convs) {
    for (int t = 0; t < kTurns; ++t) {
      const Turn& turn = c.turns[t];
      ASSERT_EQ(turn.status, 200) << describe(convs);
      EXPECT_EQ(turn.server, c.turns[0].server) << "every turn on the first turn's replica\n" << describe(convs);
      if (t > 0) {
        EXPECT_TRUE(turn.hit()) << "turn " << t + 1 << " hits its history\n" << describe(convs);
      }
    }
    used.insert(c.turns[0].server);
  }
  EXPECT_GE(used.size(), 2u) << "the conversations are spread\n" << describe(convs);
  // Each replica reports its id, and its cache hits are the turns it served.
  for (const char* name : {"r1", "r2", "r3"}) {
    json st = json::parse(http(cluster.replica(name).port, "GET", "/v1/cache/stats").body, nullptr, false);
    ASSERT_TRUE(st.is_object());
    EXPECT_EQ(st["replica_id"], name);
  }
}

TEST_F(ClusterE2E, RoundRobinSendsMostTurnsToAReplicaWithoutTheirHistory) {
  std::unique_ptr<Cluster> owner = start_cluster("roundrobin");
  ASSERT_TRUE(owner);
  Cluster& cluster = *owner;
  std::vector<Conversation> convs;
  for (int c = 0; c < kConversations; ++c) convs.emplace_back(c);
  // One conversation after the other: round-robin then puts consecutive turns on different
  // replicas (conversation by turn, all at once, would land a turn of each conversation on
  // the same replica every time, 6 being a multiple of 3).
  for (Conversation& c : convs)
    for (int t = 0; t < kTurns; ++t) ASSERT_EQ(c.step(cluster.port()).status, 200) << describe(convs);
  int later_turns = 0, misses = 0;
  for (const Conversation& c : convs)
    for (int t = 1; t < kTurns; ++t, ++later_turns) misses += c.turns[t].hit() ? 0 : 1;
  EXPECT_GT(2 * misses, later_turns) << describe(convs);
  std::printf("round-robin: %d of %d later turns missed the cache\n", misses, later_turns);
}

TEST_F(ClusterE2E, AKilledReplicasConversationsMoveAndNoRequestFails) {
  std::unique_ptr<Cluster> owner = start_cluster("affinity");
  ASSERT_TRUE(owner);
  Cluster& cluster = *owner;
  std::vector<Conversation> convs;
  for (int c = 0; c < kConversations; ++c) convs.emplace_back(c);
  for (int t = 0; t < 2; ++t) turn_of_all(convs, cluster.port());
  std::map<std::string, int> per_replica;
  for (const Conversation& c : convs) ++per_replica[c.turns[1].server];
  std::string victim;
  for (const auto& [name, n] : per_replica)
    if (victim.empty() || n > per_replica[victim]) victim = name;
  ASSERT_FALSE(victim.empty()) << describe(convs);

  // Turn 3 asks for long answers (~0.4 s of generation); the victim is killed while it is
  // generating, so HAProxy sees its connection close without an answer and retries elsewhere.
  // Where the retry goes and where turn 4 goes can differ in general: HAProxy 2.6's retry
  // walks the ring clockwise from the dead replica's point, a lookup once it is marked down
  // takes the nearest remaining point. For these six conversations they agree (the keys,
  // the replicas' ring points and so the outcome are fixed), so each moved conversation is
  // cold exactly once.
  const Cluster::Replica r = cluster.replica(victim);
  std::atomic<bool> started{false};
  std::vector<std::thread> threads;
  for (Conversation& c : convs) threads.emplace_back([&c, &cluster] { c.step(cluster.port(), 400); });
  for (int i = 0; i < 400 && !started; ++i) {
    json st = json::parse(http(r.port, "GET", "/v1/cache/stats").body, nullptr, false);
    if (st.is_object() && st["engine"]["running"].get<int64_t>() > 0) {
      started = true;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  ::kill(r.pid, SIGKILL);
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(started) << "the victim was killed mid-request";
  turn_of_all(convs, cluster.port());

  for (const Conversation& c : convs) {
    for (const Turn& t : c.turns) ASSERT_EQ(t.status, 200) << describe(convs) << cluster.log();
    const bool moved = c.turns[1].server == victim;
    if (moved) {
      EXPECT_NE(c.turns[2].server, victim) << describe(convs);
      EXPECT_FALSE(c.turns[2].hit()) << "cold once on its new replica\n" << describe(convs);
      EXPECT_EQ(c.turns[3].server, c.turns[2].server) << "and stays there\n" << describe(convs);
      EXPECT_TRUE(c.turns[3].hit()) << "warm again after\n" << describe(convs);
    } else {
      for (int t = 1; t < kTurns; ++t) {
        EXPECT_EQ(c.turns[t].server, c.turns[0].server) << "the others stay\n" << describe(convs);
        EXPECT_TRUE(c.turns[t].hit()) << describe(convs);
      }
    }
  }
}

TEST_F(ClusterE2E, ADrainingReplicaLeavesTheRingBeforeItStopsAnswering) {
  std::unique_ptr<Cluster> owner = start_cluster("affinity");
  ASSERT_TRUE(owner);
  Cluster& cluster = *owner;
  // Twelve sessions keyed by X-Session-Id, asked in a loop; find r1's.
  auto ask = [&](int session) {
    return http(cluster.port(), "POST", "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 4}}.dump(),
                {"X-Session-Id: session-" + std::to_string(session)});
  };
  std::vector<int> r1_sessions;
  for (int s = 0; s < 12; ++s) {
    HttpResult res = ask(s);
    ASSERT_EQ(res.status, 200) << res.body;
    if (res.headers["x-pagoda-server"] == "r1") r1_sessions.push_back(s);
  }
  ASSERT_FALSE(r1_sessions.empty()) << "no session hashed to r1";

  const Cluster::Replica r1 = cluster.replica("r1");
  ::kill(r1.pid, SIGTERM);  // cluster.sh runs replicas with --drain-seconds 3
  bool health_503 = false, moved_while_alive = false;
  int failures = 0;
  std::string failure;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    const bool alive = ::kill(r1.pid, 0) == 0;
    if (alive && http(r1.port, "GET", "/health").status == 503) health_503 = true;
    for (int s : r1_sessions) {
      HttpResult res = ask(s);
      if (res.status != 200) {
        ++failures;
        failure = std::to_string(res.status) + " " + res.body;
      } else if (alive && res.headers["x-pagoda-server"] != "r1" && ::kill(r1.pid, 0) == 0) {
        moved_while_alive = true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(health_503) << "a draining replica answers /health with 503";
  EXPECT_TRUE(moved_while_alive) << "its sessions moved before it stopped\n" << cluster.log();
  EXPECT_EQ(failures, 0) << failure << "\n" << cluster.log();
}

TEST_F(ClusterE2E, ARequestRefusedByABusyReplicaIsRetriedOnAnother) {
  // One request at a time per replica, no queue: a second request for the same session
  // while the first generates is refused (503 with --busy-status 503) and retried elsewhere.
  std::unique_ptr<Cluster> owner = start_cluster("affinity", {"--parallel", "1", "--max-queue", "0"});
  ASSERT_TRUE(owner);
  Cluster& cluster = *owner;
  const std::vector<std::string> key = {"X-Session-Id: busy-session"};
  HttpResult first_probe = http(cluster.port(), "POST", "/v1/completions",
                                json{{"prompt", "Once"}, {"max_tokens", 2}}.dump(), key);
  ASSERT_EQ(first_probe.status, 200) << first_probe.body;
  const std::string home = first_probe.headers["x-pagoda-server"];
  const Cluster::Replica r = cluster.replica(home);

  HttpResult long_one;
  std::thread slow([&] {
    long_one = http(cluster.port(), "POST", "/v1/completions",
                    json{{"prompt", "Once"}, {"max_tokens", 600}, {"ignore_eos", true}}.dump(), key);
  });
  bool running = false;
  for (int i = 0; i < 500 && !running; ++i) {
    json st = json::parse(http(r.port, "GET", "/v1/cache/stats").body, nullptr, false);
    running = st.is_object() && st["engine"]["running"].get<int64_t>() > 0;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(running);
  HttpResult second = http(cluster.port(), "POST", "/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 2}}.dump(), key);
  slow.join();
  EXPECT_EQ(long_one.status, 200) << long_one.body;
  EXPECT_EQ(long_one.headers["x-pagoda-server"], home);
  EXPECT_EQ(second.status, 200) << second.body << "\n" << cluster.log();
  EXPECT_NE(second.headers["x-pagoda-server"], home) << "retried on another replica";
  // The refusal happened, on the home replica (its log shows the 503).
  EXPECT_NE(cluster.log().find("[" + home + "] POST /v1/completions 503"), std::string::npos) << cluster.log();
}

}  // namespace
