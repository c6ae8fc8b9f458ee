// The control socket end to end: a ControlServer on a temporary path served by the test thread
// (as the appliance's control loop would), clients on another thread, and a handler driving a real
// agg::Engine the way the appliance does.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "inagg/agg/engine.hpp"
#include "inagg/agg/job_status.hpp"
#include "inagg/control/job_file.hpp"
#include "inagg/control/socket.hpp"

namespace inagg::control {
namespace {

const char* kJob =
    "# one worker\n"
    "id = 9\ndtype = fp32\nworkers = 1\nmessage_bytes = 1024\npayload_bytes = 1024\nwindow = 2\n"
    "conn = 0, 10.0.0.1, 0x11, 10.0.0.1, 0x12, 0\n";  // one rank: its own successor

// A stand-in for the appliance's control thread: requests go straight to an engine.
struct FakeAppliance {
  agg::Engine engine{agg::EngineConfig{}, agg::BufferOps{}};
  std::map<uint32_t, control::JobSpec> specs;
  int calls = 0;

  std::string handle(const Request& r) {
    ++calls;
    std::string err;
    switch (r.verb) {
      case Request::Verb::add:
        if (!engine.add_job(r.job, &err)) return format_error(err);
        specs[r.job.id] = r.job;
        return format_job_added(r.job.id);
      case Request::Verb::remove:
        if (!engine.remove_job(r.id, &err)) return format_error(err);
        specs.erase(r.id);
        return format_job_removed(r.id);
      case Request::Verb::list: {
        std::vector<JobStatus> jobs;
        for (uint32_t id : engine.job_ids()) {
          agg::JobInfo info;
          engine.job_info(id, &info);
          jobs.push_back(agg::job_status(info, &specs[id]));
        }
        return format_job_list(jobs);
      }
      case Request::Verb::stats: {
        if (!r.has_id) return format_counters(agg::counter_list(engine.counters()));
        agg::JobInfo info;
        if (!engine.job_info(r.id, &info)) return format_error("no job " + std::to_string(r.id));
        return format_job_stats(agg::job_status(info, &specs[r.id]));
      }
    }
    return format_error("unreachable");
  }
  ControlServer::Handler handler() {
    return [this](const Request& r) { return handle(r); };
  }
};

class ControlSocket : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "inagg-ctl-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
    path_ = dir_ + "/ctl.sock";
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  // Sends `request` from another thread while this one serves, as the appliance's loop does.
  std::string exchange(ControlServer& server, const ControlServer::Handler& handler, const std::string& request,
                       bool* ok = nullptr, const std::string& to = "", const std::string& secret = "") {
    std::string reply, error;
    std::atomic<bool> done{false};
    bool sent = false;
    std::thread client([&] {
      sent = send_request(to.empty() ? path_ : to, request, &reply, &error, 3000, "inagg", secret);
      done = true;
    });
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done && std::chrono::steady_clock::now() < give_up) {
      if (server.poll(handler) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    client.join();
    if (ok) *ok = sent;
    return sent ? reply : "CLIENT FAILED: " + error;
  }

  std::string dir_, path_;
};

TEST_F(ControlSocket, AddListStatsRemove) {
  FakeAppliance app;
  ControlServer server;
  std::string err;
  ASSERT_TRUE(server.open(path_, &err)) << err;
  EXPECT_GE(server.fd(), 0);
  const auto h = app.handler();
  EXPECT_EQ(exchange(server, h, "list\n"), "no jobs\n");
  EXPECT_EQ(exchange(server, h, std::string("add\n") + kJob), "ok job 9 added\n");
  EXPECT_EQ(exchange(server, h, std::string("add\n") + kJob),
            "error: job 9: already exists and is active; remove it first\n");
  char spec[16];
  std::string perr;
  std::snprintf(spec, sizeof spec, "%08x", job_digest(*parse_job(kJob, &perr)));
  const std::string list = exchange(server, h, "list\n");
  EXPECT_EQ(
      list.rfind(
          "id=9 state=active dtype=fp32 workers=1 released_slots=0 held_packets=0 retained_packets=0 memory_bytes=", 0),
      0u)
      << list;
  EXPECT_TRUE(list.ends_with(" spec=" + std::string(spec) + " error=\"\"\n")) << list;
  const std::string totals = exchange(server, h, "stats\n");
  EXPECT_EQ(totals.rfind("rx_packets 0\npassthrough 0\n", 0), 0u) << totals;
  size_t counters = 0;
  agg::for_each_counter(agg::EngineCounters{}, [&](std::string_view, std::string_view, uint64_t) { ++counters; });
  EXPECT_EQ(static_cast<size_t>(std::count(totals.begin(), totals.end(), '\n')), counters) << totals;
  const std::string one = exchange(server, h, "stats 9\n");
  EXPECT_EQ(one.rfind("id 9\nstate active\ndtype fp32\nworkers 1\nreleased_slots 0\n", 0), 0u) << one;
  EXPECT_EQ(exchange(server, h, "remove 9\n"), "ok job 9 removed\n");
  const std::string again = exchange(server, h, "remove 9\n");
  EXPECT_EQ(again.rfind("error: ", 0), 0u) << again;
  EXPECT_NE(again.find("9"), std::string::npos) << again;
  EXPECT_EQ(exchange(server, h, "list"), "no jobs\n");
  EXPECT_EQ(app.calls, 9);
}

TEST_F(ControlSocket, MalformedRequestsNeverReachTheHandler) {
  FakeAppliance app;
  ControlServer server;
  std::string err;
  ASSERT_TRUE(server.open(path_, &err)) << err;
  const auto h = app.handler();
  EXPECT_EQ(exchange(server, h, "reboot now\n"), "error: unknown request 'reboot'; valid: add, remove, list, stats\n");
  const std::string empty = exchange(server, h, "");
  EXPECT_EQ(empty.rfind("error: empty request", 0), 0u) << empty;
  EXPECT_EQ(exchange(server, h, "remove seven\n"),
            "error: remove: job id 'seven' is not a number; write a decimal job id, e.g. 'remove 7'\n");
  const std::string bad_job = exchange(server, h, "add\nid = 1\n");
  EXPECT_EQ(bad_job.rfind("error: job file: missing required keys", 0), 0u) << bad_job;
  std::string big = "add\n" + std::string(kMaxRequestBytes, '#');
  const std::string oversized = exchange(server, h, big);
  EXPECT_EQ(oversized, "error: request larger than 1 MiB; a job file is a few KiB (is this a job file?)\n");
  EXPECT_EQ(app.calls, 0);

  // Exactly at the limit is still a request.
  std::string at_limit = "list\n";
  at_limit.resize(kMaxRequestBytes, ' ');
  EXPECT_EQ(exchange(server, h, at_limit), "no jobs\n");
  EXPECT_EQ(app.calls, 1);
}

TEST_F(ControlSocket, HandlerFailuresAreReplies) {
  ControlServer server;
  std::string err;
  ASSERT_TRUE(server.open(path_, &err)) << err;
  EXPECT_EQ(exchange(
                server, [](const Request&) -> std::string { throw std::runtime_error("boom"); }, "list\n"),
            "error: internal error: boom\n");
  EXPECT_EQ(exchange(
                server, [](const Request&) { return std::string(); }, "list\n"),
            "error: internal error: the server produced no reply\n");
  EXPECT_EQ(exchange(
                server, [](const Request&) { return std::string("ok"); }, "list\n"),
            "ok\n");
}

TEST_F(ControlSocket, UnfinishedRequestTimesOut) {
  ControlServer server;
  std::string err;
  ASSERT_TRUE(server.open(path_, &err)) << err;
  const int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path_.c_str());
  ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  ASSERT_EQ(::write(c, "list\n", 5), 5);  // and never shut down the write side
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(server.poll([&](const Request&) {
    ++calls;
    return std::string("ok\n");
  }),
            1u);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(ms, kRequestTimeoutMs - 5);
  EXPECT_LT(ms, 4 * kRequestTimeoutMs);
  char buf[256] = {};
  const ssize_t n = ::read(c, buf, sizeof buf - 1);
  ASSERT_GT(n, 0);
  EXPECT_STREQ(buf, "error: request incomplete after 200 ms; send it, then shut down the write side to end it\n");
  EXPECT_EQ(calls, 0);
  ::close(c);
}

TEST_F(ControlSocket, SocketFileIsOwnerOnlyAndRemovedOnClose) {
  const std::string nested = dir_ + "/run";  // missing: open() creates it 0700
  path_ = nested + "/inagg.sock";
  {
    ControlServer server;
    std::string err;
    ASSERT_TRUE(server.open(path_, &err)) << err;
    struct stat st {};
    ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    ASSERT_EQ(::stat(nested.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    server.close();
    EXPECT_NE(::lstat(path_.c_str(), &st), 0);
    EXPECT_FALSE(server.is_open());
    server.close();  // twice is harmless

    ASSERT_TRUE(server.open(path_, &err)) << err;  // reopen after close
  }
  struct stat st {};
  EXPECT_NE(::lstat(path_.c_str(), &st), 0) << "the destructor must unlink the socket";
}

TEST_F(ControlSocket, SecondServerOnALivePathIsRefused) {
  ControlServer first, second;
  std::string err;
  ASSERT_TRUE(first.open(path_, &err)) << err;
  EXPECT_FALSE(second.open(path_, &err));
  EXPECT_EQ(err, "another server is already listening on '" + path_ +
                     "' (is inagg already running?); stop it or choose another control socket path");
  struct stat st {};
  EXPECT_EQ(::lstat(path_.c_str(), &st), 0) << "the live server's socket must survive";
  // The first still works (its probe connection is just an empty request).
  FakeAppliance app;
  EXPECT_EQ(exchange(first, app.handler(), "list\n"), "no jobs\n");
}

TEST_F(ControlSocket, StaleSocketIsReplaced) {
  // A server that died without unlinking: the file is there, nobody listens.
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path_.c_str());
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  ::close(s);
  std::string reply, err;
  EXPECT_FALSE(send_request(path_, "list\n", &reply, &err, 500));
  EXPECT_EQ(err, "cannot connect to " + path_ + ": Connection refused (is inagg running?)");

  ControlServer server;
  ASSERT_TRUE(server.open(path_, &err)) << err;
  FakeAppliance app;
  EXPECT_EQ(exchange(server, app.handler(), "list\n"), "no jobs\n");
}

TEST_F(ControlSocket, RefusesPathsThatAreNotSockets) {
  std::ofstream(path_) << "not a socket\n";
  ControlServer server;
  std::string err;
  EXPECT_FALSE(server.open(path_, &err));
  EXPECT_EQ(err, "'" + path_ + "' exists and is not a socket; remove it or choose another control socket path");
  EXPECT_FALSE(server.open(dir_ + "/" + std::string(120, 'x'), &err));
  EXPECT_NE(err.find("Unix socket paths are at most 107 bytes"), std::string::npos) << err;
  EXPECT_FALSE(server.open(dir_ + "/no/such/dir/ctl.sock", &err));
  EXPECT_NE(err.find("cannot create directory '" + dir_ + "/no/such/dir' for the control socket"), std::string::npos)
      << err;
}

TEST_F(ControlSocket, ClosingDoesNotUnlinkAReplacement) {
  ControlServer old_server, new_server;
  std::string err;
  ASSERT_TRUE(old_server.open(path_, &err)) << err;
  ::unlink(path_.c_str());  // e.g. an operator removed it and started another instance
  ASSERT_TRUE(new_server.open(path_, &err)) << err;
  old_server.close();
  struct stat st {};
  EXPECT_EQ(::lstat(path_.c_str(), &st), 0);
  FakeAppliance app;
  EXPECT_EQ(exchange(new_server, app.handler(), "list\n"), "no jobs\n");
}

// The secret's comparison and the line that carries it, without sockets.
TEST(ControlSecret, MatchAndLine) {
  EXPECT_TRUE(secret_matches("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(secret_matches("0123456789abcdeX", "0123456789abcdef"));
  EXPECT_FALSE(secret_matches("0123456789abcde", "0123456789abcdef"));    // a prefix
  EXPECT_FALSE(secret_matches("0123456789abcdef0", "0123456789abcdef"));  // longer
  EXPECT_FALSE(secret_matches("", ""));                                   // no secret never matches
  std::string_view body;
  EXPECT_EQ(check_secret_line("secret 0123456789abcdef\nlist\n", "0123456789abcdef", &body), SecretCheck::ok);
  EXPECT_EQ(body, "list\n");
  EXPECT_EQ(check_secret_line("secret 0123456789abcdef\r\nlist\n", "0123456789abcdef", &body), SecretCheck::ok);
  EXPECT_EQ(check_secret_line("list\n", "0123456789abcdef", &body), SecretCheck::missing);
  EXPECT_EQ(check_secret_line("secret 0123456789abcdef", "0123456789abcdef", &body), SecretCheck::missing);
  EXPECT_EQ(check_secret_line("secret wrong-wrong-wrong\nlist\n", "0123456789abcdef", &body), SecretCheck::wrong);
  EXPECT_EQ(check_secret_line("secret \nlist\n", "0123456789abcdef", &body), SecretCheck::wrong);
}

TEST_F(ControlSocket, SecretFile) {
  const std::string f = dir_ + "/secret";
  std::string secret, err;
  EXPECT_FALSE(load_secret_file(f, &secret, &err));
  EXPECT_NE(err.find("cannot read the secret file"), std::string::npos) << err;
  std::ofstream(f) << "  0123456789abcdef-xyz \nsecond line\n";
  ::chmod(f.c_str(), 0644);
  EXPECT_FALSE(load_secret_file(f, &secret, &err));
  EXPECT_NE(err.find("chmod 600"), std::string::npos) << err;
  ::chmod(f.c_str(), 0600);
  ASSERT_TRUE(load_secret_file(f, &secret, &err)) << err;
  EXPECT_EQ(secret, "0123456789abcdef-xyz");
  std::ofstream(f) << "short\n";
  EXPECT_FALSE(load_secret_file(f, &secret, &err));
  EXPECT_NE(err.find("at least 16"), std::string::npos) << err;
}

// The TCP listener: a request with the right secret reaches the handler; without one or with a
// wrong one it gets the refusal, is counted, and the handler never sees it.
TEST_F(ControlSocket, TcpListenerRequiresTheSecret) {
  FakeAppliance app;
  ControlServer server;
  std::string err;
  const std::string secret = "s3cret-s3cret-s3cret";
  EXPECT_FALSE(server.open_tcp("127.0.0.1:0", "", &err));
  EXPECT_NE(err.find("--control-secret-file"), std::string::npos) << err;
  EXPECT_FALSE(server.open_tcp("localhost:0", secret, &err));
  EXPECT_NE(err.find("not an IPv4 address"), std::string::npos) << err;
  ASSERT_TRUE(server.open_tcp("127.0.0.1:0", secret, &err)) << err;
  ASSERT_NE(server.port(), 0);
  const std::string to = "tcp://127.0.0.1:" + std::to_string(server.port());
  const auto h = app.handler();

  EXPECT_EQ(exchange(server, h, "list\n", nullptr, to, secret), "no jobs\n");
  EXPECT_EQ(exchange(server, h, std::string("add\n") + kJob, nullptr, to, secret), "ok job 9 added\n");
  EXPECT_EQ(app.calls, 2);
  EXPECT_EQ(server.refused(), 0u);

  const std::string missing = exchange(server, h, "remove 9\n", nullptr, to, "");
  EXPECT_EQ(missing, secret_refusal(SecretCheck::missing));
  EXPECT_NE(missing.find("requires the shared secret"), std::string::npos) << missing;
  const std::string wrong = exchange(server, h, "remove 9\n", nullptr, to, "s3cret-s3cret-s3creT");
  EXPECT_EQ(wrong, secret_refusal(SecretCheck::wrong));
  EXPECT_NE(wrong.find("wrong secret"), std::string::npos) << wrong;
  const std::string prefix = exchange(server, h, "remove 9\n", nullptr, to, "s3cret");
  EXPECT_EQ(prefix, secret_refusal(SecretCheck::wrong));
  EXPECT_EQ(server.refused(), 3u);
  EXPECT_EQ(app.calls, 2);  // none of the refused ones reached the handler: job 9 is still there
  EXPECT_EQ(exchange(server, h, "list\n", nullptr, to, secret).rfind("id=9 state=active", 0), 0u);

  std::string reply;
  server.close();
  EXPECT_FALSE(send_request(to, "list\n", &reply, &err, 1000, "inagg", secret));
  EXPECT_NE(err.find("cannot connect to " + to), std::string::npos) << err;
  EXPECT_FALSE(send_request("tcp://127.0.0.1", "list\n", &reply, &err, 1000, "inagg", secret));
  EXPECT_NE(err.find("is not HOST:PORT"), std::string::npos) << err;
}

TEST_F(ControlSocket, ClientErrors) {
  std::string reply, err;
  EXPECT_FALSE(send_request(path_, "list\n", &reply, &err));
  EXPECT_EQ(err, "cannot connect to " + path_ + ": No such file or directory (is inagg running?)");

  ControlServer server;  // listening, but nobody polls it
  ASSERT_TRUE(server.open(path_, &err)) << err;
  EXPECT_FALSE(send_request(path_, "list\n", &reply, &err, 100));
  EXPECT_EQ(err, "no reply from " + path_ + " within 100 ms (is inagg busy or stuck?)");
}

}  // namespace
}  // namespace inagg::control
