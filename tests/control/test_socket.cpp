// The control socket end to end: a ControlServer on a temporary path served by the test thread
// (as the appliance's control loop would), clients on another thread, and a handler driving a real
// agg::Engine the way the appliance does.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
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
#include <memory>
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
  // `handler`: a ControlServer::Handler or TenantHandler.
  template <class Handler>
  std::string exchange(ControlServer& server, const Handler& handler, const std::string& request, bool* ok = nullptr,
                       const std::string& to = "", const std::string& secret = "") {
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
  std::string perr;
  const std::string spec = job_digest(*parse_job(kJob, &perr));
  const std::string list = exchange(server, h, "list\n");
  EXPECT_EQ(
      list.rfind(
          "id=9 state=active dtype=fp32 workers=1 released_slots=0 held_packets=0 retained_packets=0 memory_bytes=", 0),
      0u)
      << list;
  EXPECT_TRUE(list.ends_with(" spec=" + spec + " error=\"\"\n")) << list;
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

// A raw client of the socket: connects, reads the greeting (its nonce), sends what it is given.
struct RawClient {
  int fd = -1;
  std::string nonce;
  RawClient(const std::string& path, uint16_t tcp_port, ControlServer* server) {
    if (tcp_port) {
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(tcp_port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    } else {
      fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strcpy(addr.sun_path, path.c_str());
      EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
    }
    if (!server) return;
    const std::string g = read_while(server, [](const std::string& t) { return t.find('\n') == std::string::npos; });
    EXPECT_EQ(g.rfind("inagg-control 2 ", 0), 0u) << g;
    nonce = g.substr(16, 32);
  }
  ~RawClient() {
    if (fd >= 0) ::close(fd);
  }
  void send_text(const std::string& t) const { ASSERT_EQ(::write(fd, t.data(), t.size()), (ssize_t)t.size()); }
  // Reads (serving `server` meanwhile) while more(got) holds, the server closes, or 5 s pass.
  template <class More>
  std::string read_while(ControlServer* server, More more) const {
    std::string got;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    char c;
    while (more(got) && std::chrono::steady_clock::now() < give_up) {
      server->poll([](const Request&) { return std::string("unexpected\n"); });
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 1) <= 0) continue;
      if (::read(fd, &c, 1) != 1) break;
      got += c;
    }
    return got;
  }
  std::string read_reply(ControlServer* server) const {
    return read_while(server, [](const std::string&) { return true; });
  }
};

// A request whose client stops half-way is never applied: its connection is closed at its
// deadline (counted), and polls meanwhile return at once.
TEST_F(ControlSocket, UnfinishedRequestTimesOut) {
  ControlServer server;
  std::string err;
  ASSERT_TRUE(server.open(path_, &err)) << err;
  RawClient c(path_, 0, &server);
  c.send_text("request 100\nlist\n");  // 5 of 100 bytes, and the client stays
  int calls = 0;
  const auto handler = [&](const Request&) {
    ++calls;
    return std::string("ok\n");
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs + 3000);
  while (server.connections() > 0 && std::chrono::steady_clock::now() < give_up) {
    EXPECT_EQ(server.poll(handler), 0u);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(server.connections(), 0u);
  EXPECT_EQ(server.dropped(), 1u);
  EXPECT_EQ(calls, 0);
}

// A client killed mid-write (its end closes after part of an add): nothing is applied, and the
// reply (for whoever still reads) says so.
TEST_F(ControlSocket, ATruncatedRequestIsNeverApplied) {
  FakeAppliance app;
  ControlServer server;
  std::string err;
  ASSERT_TRUE(server.open(path_, &err)) << err;
  RawClient c(path_, 0, &server);
  const std::string add = std::string("add\n") + kJob;
  c.send_text("request " + std::to_string(add.size()) + "\n" + add.substr(0, add.size() - 10));
  ::shutdown(c.fd, SHUT_WR);
  const std::string reply = c.read_reply(&server);
  EXPECT_NE(reply.find("error: request truncated"), std::string::npos) << reply;
  EXPECT_NE(reply.find("nothing was applied"), std::string::npos) << reply;
  EXPECT_EQ(app.calls, 0);
  EXPECT_TRUE(app.engine.job_ids().empty());
}

// The old protocol (a request without a frame) is refused with a sentence, not half understood.
TEST_F(ControlSocket, AnUnframedRequestIsRefused) {
  ControlServer server;
  std::string err;
  ASSERT_TRUE(server.open(path_, &err)) << err;
  RawClient c(path_, 0, &server);
  c.send_text("list\n");
  ::shutdown(c.fd, SHUT_WR);
  const std::string reply = c.read_reply(&server);
  EXPECT_NE(reply.find("error: not a request frame"), std::string::npos) << reply;
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

// The tenants' file and what a tenant may ask, without sockets.
TEST(ControlTenants, FileAndScope) {
  std::vector<Tenant> t;
  std::string err;
  ASSERT_TRUE(parse_tenants("0123456789abcdef-one\n", &t, &err)) << err;
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "admin");
  EXPECT_TRUE(t[0].every_job());
  ASSERT_TRUE(
      parse_tenants("# who\nalice 100-199 0123456789abcdef-alice\nbob 7 0123456789abcdef-bob  # one job\n"
                    "root * 0123456789abcdef-root\n",
                    &t, &err))
      << err;
  ASSERT_EQ(t.size(), 3u);
  EXPECT_TRUE(t[0].owns(100) && t[0].owns(199) && !t[0].owns(99) && !t[0].owns(200));
  EXPECT_TRUE(t[1].owns(7) && !t[1].owns(8));
  EXPECT_TRUE(t[2].every_job());
  EXPECT_FALSE(parse_tenants("alice 100-199 short\n", &t, &err));
  EXPECT_NE(err.find("shorter than 16"), std::string::npos) << err;
  EXPECT_FALSE(parse_tenants("alice 199-100 0123456789abcdef-alice\n", &t, &err));
  EXPECT_NE(err.find("not a job range"), std::string::npos) << err;
  EXPECT_FALSE(parse_tenants("a * 0123456789abcdef-a\na * 0123456789abcdef-b\n", &t, &err));
  EXPECT_NE(err.find("appears twice"), std::string::npos) << err;
  EXPECT_FALSE(parse_tenants("0123456789abcdef-one\n0123456789abcdef-two\n", &t, &err));

  ASSERT_TRUE(parse_tenants("alice 100-199 prefixes=10.0.0.0/24 0123456789abcdef-alice\n", &t, &err)) << err;
  Request r;
  r.verb = Request::Verb::remove;
  r.id = 150;
  EXPECT_EQ(tenant_refusal(t[0], r), "");
  r.id = 9;
  EXPECT_NE(tenant_refusal(t[0], r).find("not yours"), std::string::npos);
  r.verb = Request::Verb::stats;
  r.has_id = false;
  EXPECT_NE(tenant_refusal(t[0], r).find("every tenant's jobs"), std::string::npos);
  EXPECT_EQ(filter_job_list(t[0], "id=9 state=active\nid=150 state=failed error=\"x\"\n"),
            "id=150 state=failed error=\"x\"\n");
  EXPECT_EQ(filter_job_list(t[0], "id=9 state=active\n"), "no jobs\n");
}

// A tenant's addresses, ports and budgets in the tenants' file; tenants that would share anything
// refused with the line.
TEST(ControlTenants, AddressesPortsAndBudgets) {
  std::vector<Tenant> t;
  std::string err;
  ASSERT_TRUE(
      parse_tenants("alice 100-199 prefixes=10.0.1.0/24,fd00:1::/64,10.9.9.9 ports=0,1 max_jobs=4 "
                    "max_memory=64M max_mbufs=20000 0123456789abcdef-alice=\n"
                    "bob 200-299 prefixes=10.0.2.0/24 0123456789abcdef-bob\n"
                    "ops * 0123456789abcdef-ops\n",
                    &t, &err))
      << err;
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].secret, "0123456789abcdef-alice=");  // the secret is the last word, '=' and all
  ASSERT_EQ(t[0].prefixes.size(), 3u);
  EXPECT_EQ(prefix_text(t[0].prefixes[1]), "fd00:1::/64");
  EXPECT_EQ(prefix_text(t[0].prefixes[2]), "10.9.9.9/32");
  EXPECT_EQ(t[0].ports, (std::vector<uint16_t>{0, 1}));
  EXPECT_EQ(t[0].max_jobs, 4u);
  EXPECT_EQ(t[0].max_memory_bytes, size_t{64} << 20);
  EXPECT_EQ(t[0].max_mbufs, 20000u);
  EXPECT_FALSE(t[1].max_jobs.has_value());
  // Prefixes against addresses, as the engine reads them (an IPv4-mapped GID is its IPv4 address).
  const AddressPrefix p = t[0].prefixes[0];
  EXPECT_TRUE(p.contains(*util::parse_ip("10.0.1.0")) && p.contains(*util::parse_ip("10.0.1.255")));
  EXPECT_FALSE(p.contains(*util::parse_ip("10.0.2.1")) || p.contains(*util::parse_ip("10.0.0.255")));
  EXPECT_TRUE(p.contains(*util::parse_ip("::ffff:10.0.1.7")));
  EXPECT_FALSE(p.contains(*util::parse_ip("fd00:1::1")));
  EXPECT_TRUE(t[0].prefixes[1].contains(*util::parse_ip("fd00:1::ffff:1")));
  EXPECT_FALSE(t[0].prefixes[1].contains(*util::parse_ip("fd00:2::1")));
  ASSERT_TRUE(parse_prefix("::ffff:10.0.1.0/120"));
  EXPECT_EQ(prefix_text(*parse_prefix("::ffff:10.0.1.0/120")), "10.0.1.0/24");
  EXPECT_TRUE(parse_prefix("0.0.0.0/0")->contains(*util::parse_ip("192.0.2.1")));
  for (const char* bad : {"10.0.1.5/24", "10.0.1.0/33", "10.0.1.0/", "10.0.1/24", "fd00::/129", "x/8", "10.0.1.0/-1"})
    EXPECT_FALSE(parse_prefix(bad)) << bad;

  struct Case {
    const char* file;
    const char* says;
  };
  const Case refused[] = {
      {"a 1-9 prefixes=10.0.0.0/8 0123456789abcdef-a\nb 5-20 prefixes=11.0.0.0/8 0123456789abcdef-b\n",
       "line 2: tenant b: its jobs 5-20 overlap tenant a's 1-9 (line 1)"},
      {"a 1-9 prefixes=10.0.0.0/8 0123456789abcdef-a\n\nb 10-20 prefixes=10.1.0.0/16 0123456789abcdef-b\n",
       "line 3: tenant b: its prefix 10.1.0.0/16 overlaps tenant a's 10.0.0.0/8 (line 1)"},
      {"a 1-9 ports=3 0123456789abcdef-a\nb 10-20 ports=1,3 0123456789abcdef-b\n",
       "line 2: tenant b: its port 3 is tenant a's too (line 1)"},
      {"a 1-9 prefixes=10.0.0.5/8 0123456789abcdef-a\n", "'10.0.0.5/8' is not an address prefix"},
      {"a 1-9 prefixes=10.0.0.0/8 prefixes=11.0.0.0/8 0123456789abcdef-a\n", "prefixes= is given twice"},
      {"a 1-9 ports=65535 0123456789abcdef-a\n", "'65535' is not an appliance port"},
      {"a 1-9 ports=1,1 0123456789abcdef-a\n", "port 1 is listed twice"},
      {"a 1-9 max_memory=12T 0123456789abcdef-a\n", "max_memory=12T is not a number of bytes"},
      {"a 1-9 max_jobs=-1 0123456789abcdef-a\n", "max_jobs=-1 is not a number"},
      {"a 1-9 colour=blue 0123456789abcdef-a\n", "unknown option 'colour'"},
      {"a 1-9 0123456789abcdef-a prefixes=10.0.0.0/8\n", "'0123456789abcdef-a' is not an option"},
      {"ops * prefixes=10.0.0.0/8 0123456789abcdef-ops\n", "the operator's credential"},
  };
  for (const Case& c : refused) {
    EXPECT_FALSE(parse_tenants(c.file, &t, &err)) << c.file;
    EXPECT_NE(err.find(c.says), std::string::npos) << c.file << ": " << err;
  }
  // The operator's credential (*) may sit beside tenants with ranges.
  EXPECT_TRUE(parse_tenants("ops * 0123456789abcdef-ops\na 1-9 prefixes=10.0.0.0/8 0123456789abcdef-a\n", &t, &err))
      << err;
}

// What a tenant may add: its ids, on its addresses and ports; within its budgets.
TEST(ControlTenants, AddsOnItsOwnAddressesPortsAndBudgets) {
  std::vector<Tenant> t;
  std::string err;
  ASSERT_TRUE(
      parse_tenants("alice 100-199 prefixes=10.0.1.0/24 ports=0,1 max_jobs=2 max_memory=1M max_mbufs=100 "
                    "0123456789abcdef-alice\n"
                    "bob 200-299 prefixes=10.0.2.0/24,fd00:2::/64 ports=2 0123456789abcdef-bob\n"
                    "carol 300-399 prefixes=10.0.3.0/24 0123456789abcdef-carol\n"
                    "dave 400-499 0123456789abcdef-dave\n"
                    "ops * 0123456789abcdef-ops\n",
                    &t, &err))
      << err;
  const Tenant &alice = t[0], &bob = t[1], &carol = t[2], &dave = t[3], &ops = t[4];
  const auto add = [](uint32_t id, const char* a, const char* b, uint16_t pa, uint16_t pb) {
    Request r;
    r.verb = Request::Verb::add;
    r.id = id;
    r.has_id = true;
    r.job.id = id;
    r.job.workers = 2;
    r.job.conns = {{0, *util::parse_ip(a), *util::parse_ip(b), 0x11, 0x12, 0, pa},
                   {1, *util::parse_ip(b), *util::parse_ip(a), 0x13, 0x14, 0, pb}};
    return r;
  };
  EXPECT_EQ(tenant_refusal(alice, add(150, "10.0.1.1", "10.0.1.2", 0, 1), t), "");
  EXPECT_EQ(tenant_refusal(alice, add(150, "10.0.1.1", "10.0.2.2", 0, 1), t),
            "job 150: rank 0's destination address 10.0.2.2 is not one of tenant alice's (10.0.1.0/24)");
  // An IPv4-mapped GID of bob's address is bob's address.
  EXPECT_EQ(tenant_refusal(alice, add(150, "::ffff:10.0.2.1", "10.0.1.2", 0, 1), t),
            "job 150: rank 0's source address 10.0.2.1 is not one of tenant alice's (10.0.1.0/24)");
  EXPECT_EQ(tenant_refusal(alice, add(150, "10.0.1.1", "10.0.1.2", 0, kAnyPort), t),
            "job 150: rank 1 names no appliance port; tenant alice's connections must name one of its ports (0, 1)");
  EXPECT_EQ(tenant_refusal(alice, add(150, "10.0.1.1", "10.0.1.2", 0, 2), t),
            "job 150: rank 1 names port 2, which is not one of tenant alice's ports (0, 1)");
  EXPECT_NE(tenant_refusal(alice, add(250, "10.0.1.1", "10.0.1.2", 0, 1), t).find("not yours"), std::string::npos);
  EXPECT_EQ(tenant_refusal(bob, add(250, "fd00:2::1", "fd00:2::2", 2, 2), t), "");
  // A tenant without ports may name a port nobody owns, or none, but not another's.
  EXPECT_EQ(tenant_refusal(carol, add(350, "10.0.3.1", "10.0.3.2", kAnyPort, 5), t), "");
  const std::string others = tenant_refusal(carol, add(350, "10.0.3.1", "10.0.3.2", 1, kAnyPort), t);
  EXPECT_EQ(others,
            "job 350: rank 0 names port 1, which is not open to tenant carol (leave the port out, or ask the "
            "operator for ports of its own)");
  // No prefixes: no job at all, until the operator gives it some.
  EXPECT_NE(tenant_refusal(dave, add(450, "10.0.4.1", "10.0.4.2", kAnyPort, kAnyPort), t).find("owns no addresses"),
            std::string::npos);
  EXPECT_EQ(tenant_refusal(ops, add(7, "10.0.2.1", "10.0.1.2", 2, 0), t), "");
  // None of these refusals names another tenant or its addresses.
  for (const Request& r : {add(150, "10.0.2.1", "10.0.2.2", 0, 1), add(150, "10.0.1.1", "10.0.1.2", 2, 1),
                           add(350, "10.0.3.1", "10.0.3.2", 2, 2)})
    for (const Tenant* who : {&alice, &carol}) {
      const std::string why = tenant_refusal(*who, r, t);
      EXPECT_EQ(why.find("bob"), std::string::npos) << why;
      EXPECT_EQ(why.find("10.0.2.0"), std::string::npos) << why;
    }

  // Budgets: jobs, memory, mbufs, each named.
  EXPECT_EQ(budget_refusal(alice, 150, {1, 512 << 10, 50}, 256 << 10, 50), "");
  EXPECT_EQ(budget_refusal(alice, 150, {2, 0, 0}, 0, 0),
            "job 150: tenant alice's budget of 2 jobs is used up (2 registered): remove one first");
  EXPECT_EQ(budget_refusal(alice, 150, {1, 768 << 10, 0}, 512 << 10, 0),
            "job 150: tenant alice's memory budget: it needs 512 KiB of slot memory, 256 of 1024 KiB are free; lower "
            "window or message_bytes");
  EXPECT_EQ(budget_refusal(alice, 150, {1, 0, 60}, 0, 41),
            "job 150: tenant alice's mbuf budget: it needs up to 41 held packet buffers, 40 of 100 are free; lower "
            "window or message_bytes");
  EXPECT_EQ(budget_refusal(bob, 250, {1000, size_t{1} << 40, 1u << 30}, 1u << 30, 1u << 30), "");  // no budgets
  EXPECT_EQ(budget_refusal(ops, 7, {1000, size_t{1} << 40, 1u << 30}, 1u << 30, 1u << 30), "");
}

// What a tenant's budget is checked against before an add is what the engine then reserves and
// reports: an allreduce, a reduce-scatter, and an allreduce spread over two lcores' engines.
TEST(ControlTenants, TheFootprintIsWhatTheEngineReserves) {
  std::string err;
  const std::string ring =
      "id = 5\ndtype = fp32\nworkers = 3\nmessage_bytes = 4096\npayload_bytes = 1024\nwindow = 3\n"
      "conn = 0, 10.0.0.1, 0x11, 10.0.0.2, 0x12, 0\nconn = 1, 10.0.0.2, 0x13, 10.0.0.3, 0x14, 0\n"
      "conn = 2, 10.0.0.3, 0x15, 10.0.0.1, 0x16, 0\n";
  for (const std::string& text : {ring, ring + "collective = reduce_scatter\nchunk = 2\n"}) {
    const std::optional<JobSpec> spec = parse_job(text, &err);
    ASSERT_TRUE(spec) << err;
    agg::Engine engine{agg::EngineConfig{}, agg::BufferOps{}};
    ASSERT_TRUE(engine.add_job(*spec, &err)) << err;
    agg::JobInfo info{};
    ASSERT_TRUE(engine.job_info(5, &info));
    const agg::Engine::Footprint f = agg::Engine::footprint(*spec);
    EXPECT_GT(f.memory_bytes, 0u);
    EXPECT_EQ(f.memory_bytes, info.memory_bytes) << text;
    EXPECT_EQ(f.mbufs, info.mbuf_quota) << text;
  }
  // A job of two channels: each channel's engine job reserves its own, and the footprint is the sum.
  const std::optional<JobSpec> spec = parse_job(
      ring +
          "channels = 2\nconn = 0, 10.0.0.1, 0x21, 10.0.0.2, 0x22, 0\nconn = 1, 10.0.0.2, 0x23, 10.0.0.3, 0x24, 0\n"
          "conn = 2, 10.0.0.3, 0x25, 10.0.0.1, 0x26, 0\n",
      &err);
  ASSERT_TRUE(spec) << err;
  size_t memory = 0, mbufs = 0;
  for (uint16_t c = 0; c < 2; ++c) {
    agg::Engine engine{agg::EngineConfig{}, agg::BufferOps{}};
    ASSERT_TRUE(engine.add_job(control::channel_spec(*spec, c), &err)) << err;
    agg::JobInfo info{};
    ASSERT_TRUE(engine.job_info(5, &info, c));
    memory += info.memory_bytes;
    mbufs += info.mbuf_quota;
  }
  EXPECT_EQ(agg::Engine::footprint(*spec).memory_bytes, memory);
  EXPECT_EQ(agg::Engine::footprint(*spec).mbufs, mbufs);
  JobSpec bad = *spec;
  bad.payload_bytes = 0;
  EXPECT_EQ(agg::Engine::footprint(bad).memory_bytes, 0u);
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

// The TCP listener: a request with the right credential reaches the handler; without one or with
// a wrong one it gets the refusal, is counted, and the handler never sees it.
TEST_F(ControlSocket, TcpListenerRequiresTheCredential) {
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
  EXPECT_EQ(exchange(server, h, std::string("add\n") + kJob, nullptr, to, "admin " + secret), "ok job 9 added\n");
  EXPECT_EQ(app.calls, 2);
  EXPECT_EQ(server.refused(), 0u);

  const std::string missing = exchange(server, h, "remove 9\n", nullptr, to, "");
  EXPECT_NE(missing.find("requires a credential"), std::string::npos) << missing;
  const std::string wrong = exchange(server, h, "remove 9\n", nullptr, to, "s3cret-s3cret-s3creT");
  EXPECT_NE(wrong.find("wrong credential"), std::string::npos) << wrong;
  const std::string prefix = exchange(server, h, "remove 9\n", nullptr, to, "s3cret");
  EXPECT_NE(prefix.find("wrong credential"), std::string::npos) << prefix;
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

// A request recorded on the wire (a valid MAC over one connection's nonce) played on another
// connection is refused: the nonce differs.
TEST_F(ControlSocket, AReplayedRequestIsRefused) {
  FakeAppliance app;
  ControlServer server;
  std::string err;
  const std::string secret = "s3cret-s3cret-s3cret";
  ASSERT_TRUE(server.open_tcp("127.0.0.1:0", secret, &err)) << err;
  const std::string body = std::string("add\n") + kJob;
  std::string recorded;
  {
    RawClient first(path_, server.port(), &server);
    recorded = "request " + std::to_string(body.size()) + " admin " + request_mac(secret, first.nonce, "admin", body) +
               "\n" + body;
  }
  RawClient second(path_, server.port(), &server);
  second.send_text(recorded);
  ::shutdown(second.fd, SHUT_WR);
  std::string reply;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (reply.find('\n', reply.find('\n') + 1) == std::string::npos && std::chrono::steady_clock::now() < give_up) {
    server.poll(app.handler());
    char buf[512];
    pollfd p{second.fd, POLLIN, 0};
    if (::poll(&p, 1, 1) > 0) {
      const ssize_t n = ::read(second.fd, buf, sizeof buf);
      if (n <= 0) break;
      reply.append(buf, static_cast<size_t>(n));
    }
  }
  EXPECT_NE(reply.find("error: wrong credential"), std::string::npos) << reply;
  EXPECT_EQ(app.calls, 0);
  EXPECT_EQ(server.refused(), 1u);
}

// A tenant manages its own jobs only, and sees only them; it adds them on its own addresses only.
TEST_F(ControlSocket, ATenantManagesOnlyItsOwnJobs) {
  FakeAppliance app;
  ControlServer server;
  std::string err;
  std::vector<Tenant> tenants;
  ASSERT_TRUE(
      parse_tenants("alice 100-199 prefixes=10.0.0.0/24 0123456789abcdef-alice\n"
                    "bob 200-299 prefixes=10.0.1.0/24 0123456789abcdef-bob\n"
                    "ops * 0123456789abcdef-ops\n",
                    &tenants, &err))
      << err;
  ASSERT_TRUE(server.open_tcp("127.0.0.1:0", tenants, &err)) << err;
  const std::string to = "tcp://127.0.0.1:" + std::to_string(server.port());
  const auto h = app.handler();
  std::string job150 = kJob;
  job150.replace(job150.find("id = 9"), 6, "id = 150");
  const std::string alice = "alice 0123456789abcdef-alice", bob = "bob 0123456789abcdef-bob";
  const std::string foreign = exchange(server, h, std::string("add\n") + kJob, nullptr, to, alice);
  EXPECT_NE(foreign.find("job 9 is not yours: tenant alice manages jobs 100..199 only"), std::string::npos) << foreign;
  EXPECT_EQ(exchange(server, h, "add\n" + job150, nullptr, to, alice), "ok job 150 added\n");
  EXPECT_NE(exchange(server, h, "remove 150\n", nullptr, to, bob).find("not yours"), std::string::npos);
  EXPECT_NE(exchange(server, h, "stats 150\n", nullptr, to, bob).find("not yours"), std::string::npos);
  EXPECT_EQ(exchange(server, h, "list\n", nullptr, to, bob), "no jobs\n");
  EXPECT_EQ(exchange(server, h, "list\n", nullptr, to, alice).rfind("id=150 state=active", 0), 0u);
  EXPECT_EQ(exchange(server, h, "list\n", nullptr, to, "ops 0123456789abcdef-ops").rfind("id=150", 0), 0u);
  // bob's secret under alice's name is no credential
  EXPECT_NE(exchange(server, h, "list\n", nullptr, to, "alice 0123456789abcdef-bob").find("wrong credential"),
            std::string::npos);
  // alice's job on bob's addresses never reaches the appliance, and the reason names nothing of bob
  std::string on_bobs = kJob;
  on_bobs.replace(on_bobs.find("id = 9"), 6, "id = 151");
  on_bobs.replace(on_bobs.find("10.0.0.1, 0x11, 10.0.0.1"), 24, "10.0.1.1, 0x11, 10.0.1.1");
  const std::string refused = exchange(server, h, "add\n" + on_bobs, nullptr, to, alice);
  EXPECT_EQ(refused, "error: job 151: rank 0's source address 10.0.1.1 is not one of tenant alice's (10.0.0.0/24)\n");
  EXPECT_EQ(refused.find("bob"), std::string::npos);
  EXPECT_EQ(refused.find("10.0.1.0"), std::string::npos);
  std::string bobs = on_bobs;
  bobs.replace(bobs.find("id = 151"), 8, "id = 250");
  EXPECT_EQ(exchange(server, h, "add\n" + bobs, nullptr, to, bob), "ok job 250 added\n");
  EXPECT_EQ(exchange(server, h, "remove 150\n", nullptr, to, alice), "ok job 150 removed\n");
  EXPECT_EQ(app.calls, 6);  // add, list, list, list, add, remove
}

// The handler hears who asks: the tenant over TCP, nobody (the operator) on the local socket.
TEST_F(ControlSocket, TheHandlerIsToldTheTenant) {
  std::string err;
  std::vector<Tenant> tenants;
  ASSERT_TRUE(parse_tenants("alice 100-199 prefixes=10.0.0.0/24 0123456789abcdef-alice\n", &tenants, &err)) << err;
  ControlServer tcp, local;
  ASSERT_TRUE(tcp.open_tcp("127.0.0.1:0", tenants, &err)) << err;
  ASSERT_TRUE(local.open(path_, &err)) << err;
  const ControlServer::TenantHandler h = [](const Request&, const Tenant* t) {
    return std::string(t ? "tenant " + t->name : "operator") + "\n";
  };
  EXPECT_EQ(exchange(tcp, h, "stats 150\n", nullptr, "tcp://127.0.0.1:" + std::to_string(tcp.port()),
                     "alice 0123456789abcdef-alice"),
            "tenant alice\n");
  EXPECT_EQ(exchange(local, h, "stats 150\n"), "operator\n");
}

// 64 connections that say nothing do not keep a real client waiting: every connection is served
// at once, each with its own deadline.
TEST_F(ControlSocket, IdleConnectionsDoNotStarveARealClient) {
  FakeAppliance app;
  ControlServer server;
  std::string err;
  const std::string secret = "s3cret-s3cret-s3cret";
  ASSERT_TRUE(server.open_tcp("127.0.0.1:0", secret, &err)) << err;
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 64; ++i) idle.push_back(std::make_unique<RawClient>(path_, server.port(), nullptr));
  bool ok = false;
  const std::string to = "tcp://127.0.0.1:" + std::to_string(server.port());
  // A rank's registration waits 5 s per request; one second is plenty for a server not starved.
  std::string reply, error;
  std::atomic<bool> done{false};
  std::thread client([&] {
    ok = send_request(to, "list\n", &reply, &error, 1000, "inagg", secret);
    done = true;
  });
  while (!done) {
    server.poll(app.handler());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  client.join();
  EXPECT_TRUE(ok) << error;
  EXPECT_EQ(reply, "no jobs\n");
  EXPECT_EQ(server.refused(), 0u);  // the idle ones are no refusals (and log nothing)
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
