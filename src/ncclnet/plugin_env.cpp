#include "plugin_env.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "inagg/client/clock.hpp"
#include "inagg/client/rank.hpp"

namespace inagg::ncclnet {
namespace {

Logger logger = nullptr;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// A whole unsigned number of the variable, or `fallback` (with *why when it is not one).
uint64_t number_or(const char* name, uint64_t fallback, std::string* why) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 0);
  if (errno || *end || v[0] == '-') {
    *why = std::string(name) + "='" + v + "' is not a whole number";
    return fallback;
  }
  return n;
}

PluginEnv read_env() {
  PluginEnv e;
  e.control = env_or("INAGG_CONTROL", "");
  e.control_secret_file = env_or("INAGG_CONTROL_SECRET_FILE", "");
  std::string why;
  e.job_id = static_cast<uint32_t>(number_or("INAGG_JOB_ID", 0, &why));
  e.payload = static_cast<uint32_t>(number_or("INAGG_PAYLOAD", 0, &why));
  e.message = static_cast<uint32_t>(number_or("INAGG_MESSAGE", e.message, &why));
  e.chunk_bytes = number_or("INAGG_CHUNK_BYTES", e.chunk_bytes, &why);
  e.timeout_s = static_cast<double>(number_or("INAGG_TIMEOUT_S", 60, &why));
  if (!why.empty()) log_line(kLogWarn, "inagg: %s; its default is used", why.c_str());
  e.dtype_name = env_or("INAGG_DTYPE", "fp32");
  if (const std::optional<util::Dtype> d = client::parse_dtype_name(e.dtype_name))
    e.dtype = *d;
  else
    e.why_bad_dtype = "INAGG_DTYPE='" + e.dtype_name + "' is not one of fp32, fp16, bf16, int32";
  const std::string address = env_or("INAGG_ADDRESS", ""), ifname = env_or("INAGG_IFNAME", "");
  std::optional<util::IpAddr> ip;
  if (!address.empty()) {
    ip = util::parse_ip(address);
    if (!ip || ip->version != util::IpVersion::v4) {
      e.why_no_address = "INAGG_ADDRESS='" + address + "' is not an IPv4 address";
      ip.reset();
    }
  } else if (!ifname.empty()) {
    ip = client::interface_address(ifname, &why);
    if (!ip) e.why_no_address = "INAGG_IFNAME=" + ifname + ": " + why;
  } else {
    e.why_no_address = "no address for this rank: set INAGG_ADDRESS (its IPv4 address) or INAGG_IFNAME (its interface)";
  }
  if (ip) {
    in_addr a{};
    std::memcpy(&a.s_addr, ip->bytes.data(), 4);
    e.address = a;
  }
  return e;
}

bool wait_fd(int fd, short events, uint64_t deadline_ns, std::string* why, const char* what) {
  while (true) {
    const uint64_t now = client::now_ns();
    if (now >= deadline_ns) {
      *why = std::string("timed out waiting to ") + what;
      return false;
    }
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>(std::min<uint64_t>((deadline_ns - now) / 1000000 + 1, 1000));
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) {
      *why = std::string("poll: ") + std::strerror(errno);
      return false;
    }
  }
}

}  // namespace

const PluginEnv& plugin_env() {
  static const PluginEnv env = read_env();
  return env;
}

void set_logger(Logger log) {
  if (log) logger = log;
}

void log_line(LogLevel level, const char* fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (logger)
    logger(level, kLogInit | kLogNet, __FILE__, __LINE__, "%s", text);
  else if (level == kLogWarn)
    std::fprintf(stderr, "%s\n", text);
}

int listen_tcp(in_addr address, uint16_t* port, std::string* why) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = address;
  socklen_t len = sizeof sa;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    char a[INET_ADDRSTRLEN];
    *why = std::string("cannot listen on ") + inet_ntop(AF_INET, &address, a, sizeof a) + ": " + std::strerror(errno) +
           " (is INAGG_ADDRESS this host's own?)";
    ::close(fd);
    return -1;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

int connect_tcp(in_addr address, uint16_t port, uint64_t deadline_ns, std::string* why) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = address;
  sa.sin_port = htons(port);
  char a[INET_ADDRSTRLEN];
  const std::string peer = std::string(inet_ntop(AF_INET, &address, a, sizeof a)) + ":" + std::to_string(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) {
    *why = "cannot connect to " + peer + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (!wait_fd(fd, POLLOUT, deadline_ns, why, ("connect to " + peer).c_str()) ||
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    if (err) *why = "cannot connect to " + peer + ": " + std::strerror(err);
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

int accept_tcp(int listen_fd, uint64_t deadline_ns, std::string* why) {
  if (!wait_fd(listen_fd, POLLIN, deadline_ns, why, "accept a rank's connection")) return -1;
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) *why = std::string("accept: ") + std::strerror(errno);
  const int one = 1;
  if (fd >= 0) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool write_all(int fd, const std::string& text, uint64_t deadline_ns, std::string* why) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_fd(fd, POLLOUT, deadline_ns, why, "send to a rank")) return false;
    } else {
      *why = std::string("send: ") + std::strerror(errno);
      return false;
    }
  }
  return true;
}

bool read_line(int fd, std::string* line, uint64_t deadline_ns, std::string* why) {
  line->clear();
  while (true) {
    char c;
    const ssize_t n = ::recv(fd, &c, 1, 0);
    if (n == 1) {
      if (c == '\n') return true;
      if (line->size() > 65536) {
        *why = "a line of more than 64 KiB";
        return false;
      }
      line->push_back(c);
    } else if (n == 0) {
      *why = "the rank closed its connection";
      return false;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!wait_fd(fd, POLLIN, deadline_ns, why, "read a rank's line")) return false;
    } else {
      *why = std::string("recv: ") + std::strerror(errno);
      return false;
    }
  }
}

}  // namespace inagg::ncclnet
