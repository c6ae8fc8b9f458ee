#include "inagg/control/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <exception>
#include <thread>

#include "inagg/util/log.hpp"
#include "socket_io.hpp"

namespace inagg::control {
using namespace socket_io;

ControlServer::~ControlServer() { close(); }

bool ControlServer::open_tcp(const std::string& listen_on, const std::string& secret, std::string* error) {
  Tenant admin;
  admin.name = "admin";
  admin.secret = secret;
  return open_tcp(listen_on, secret.empty() ? std::vector<Tenant>{} : std::vector<Tenant>{admin}, error);
}

bool ControlServer::open_tcp(const std::string& listen_on, std::vector<Tenant> tenants, std::string* error) {
  close();
  if (tenants.empty()) {
    *error = "the TCP control listener needs a shared secret (--control-secret-file)";
    return false;
  }
  std::string host;
  uint16_t port = 0;
  if (!split_host_port(listen_on, &host, &port, error)) {
    *error = "--control-tcp: " + *error;
    return false;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    *error = "--control-tcp: '" + host + "' is not an IPv4 address (127.0.0.1, or 0.0.0.0 for every address)";
    return false;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0) {
    *error = "cannot listen on " + listen_on + " for control requests: " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  fd_ = fd;
  tcp_ = true;
  tenants_ = std::move(tenants);
  port_ = ntohs(a.sin_port);
  if (a.sin_addr.s_addr == htonl(INADDR_ANY))
    util::log(util::LogModule::control, util::LogLevel::warning,
              "control over TCP listens on every address (%s): any host that reaches this one can try; give the "
              "address of the control network instead",
              listen_on.c_str());
  return true;
}

bool ControlServer::set_tenants(std::vector<Tenant> tenants, std::string* error) {
  if (tenants.empty()) {
    *error = "the TCP control listener needs at least one tenant (--control-secret-file)";
    return false;
  }
  tenants_ = std::move(tenants);
  return true;
}

bool ControlServer::open(const std::string& path, std::string* error) {
  close();
  sockaddr_un addr;
  if (!make_address(path, &addr, error)) return false;

  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      // Only the socket's own directory (/run/inagg): a missing /run means something else is wrong.
      if (errno != ENOENT || ::mkdir(dir.c_str(), 0700) != 0) {
        *error = "cannot create directory '" + dir + "' for the control socket: " + std::strerror(errno);
        return false;
      }
    } else if (!S_ISDIR(st.st_mode)) {
      *error = "'" + dir + "' is not a directory; choose another control socket path";
      return false;
    }
  }

  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      *error = "'" + path + "' exists and is not a socket; remove it or choose another control socket path";
      return false;
    }
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (probe < 0) {
      *error = std::string("cannot create a socket: ") + std::strerror(errno);
      return false;
    }
    const int r = ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    const int err = errno;
    ::close(probe);
    if (r == 0 || err == EAGAIN || err == EINPROGRESS) {  // EAGAIN: alive, its backlog is full
      *error = "another server is already listening on '" + path +
               "' (is inagg already running?); stop it or choose another control socket path";
      return false;
    }
    if (err != ECONNREFUSED) {
      *error = "cannot check the existing socket '" + path + "': " + std::strerror(err);
      return false;
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {  // stale: left by a server that died
      *error = "cannot remove the stale socket '" + path + "': " + std::strerror(errno);
      return false;
    }
  }

  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("cannot create a socket: ") + std::strerror(errno);
    return false;
  }
  // The file is created by bind() with the umask applied: make it 0600 from the start rather than
  // chmod after, so no other user can ever connect. (umask is per process; this runs at start-up.)
  const mode_t old_mask = ::umask(0177);
  const int b = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int bind_err = errno;
  ::umask(old_mask);
  if (b != 0) {
    ::close(fd);
    *error = "cannot create the control socket '" + path + "': " + std::strerror(bind_err);
    return false;
  }
  if (::chmod(path.c_str(), 0600) != 0 || ::stat(path.c_str(), &st) != 0 || ::listen(fd, 16) != 0) {
    *error = "cannot set up the control socket '" + path + "': " + std::strerror(errno);
    ::unlink(path.c_str());
    ::close(fd);
    return false;
  }
  fd_ = fd;
  path_ = path;
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  return true;
}

void ControlServer::close() {
  for (Connection& c : conns_) ::close(c.fd);
  conns_.clear();
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  if (tcp_) {
    tcp_ = false;
    return;
  }
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) ::unlink(path_.c_str());
  path_.clear();
}

}  // namespace inagg::control
