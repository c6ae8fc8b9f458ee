// The plugin's point-to-point network (ncclNet_v11): NCCL 2.28 takes a plugin library's CollNet
// only beside a network of the same library, so this one exports its own, plain TCP over host
// memory at INAGG_ADDRESS (as NCCL's built-in socket transport does; no delegation to another
// plugin). Each message is an 8-byte length and its bytes, in the order the requests were posted
// on the connection; requests progress in test(), never blocking.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>

#include "inagg/client/clock.hpp"
#include "plugin_api.hpp"
#include "plugin_env.hpp"

namespace inagg::ncclnet {
namespace {

constexpr uint32_t kNetMagic = 0x696e6174;  // "inat"

struct NetHandle {
  uint32_t magic;
  in_addr address;
  uint16_t port;
};
static_assert(sizeof(NetHandle) <= kHandleBytes);

struct NetListen {
  int fd = -1;
};

struct Connection;
struct NetRequest {
  Connection* connection = nullptr;
  uint8_t* data = nullptr;
  uint64_t capacity = 0;  // a receive's room; a send's size
  uint64_t length = 0;
  uint8_t header[8] = {};
  uint64_t moved = 0;  // header and data bytes so far
  bool done = false;
};

// One direction of one peer's connection. Used by NCCL's proxy thread only.
struct Connection {
  int fd = -1;
  bool sends = false;
  std::deque<NetRequest*> queue;  // posted, not yet moved; only the head moves
  std::string error;
};

ncclResult_t fail(ncclResult_t code, const std::string& why) {
  log_line(kLogWarn, "inagg (net): %s", why.c_str());
  return code;
}

// Moves the head requests as far as the socket allows. False: the connection failed (error).
bool progress(Connection& c) {
  while (!c.queue.empty()) {
    NetRequest& r = *c.queue.front();
    while (r.moved < 8 + r.length || (!c.sends && r.moved < 8)) {
      const bool header = r.moved < 8;
      uint8_t* at = header ? r.header + r.moved : r.data + (r.moved - 8);
      const size_t want = header ? 8 - r.moved : r.length - (r.moved - 8);
      const ssize_t n = c.sends ? ::send(c.fd, at, want, MSG_NOSIGNAL) : ::recv(c.fd, at, want, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
      if (n <= 0) {
        c.error = n == 0 ? "the peer closed the connection" : std::strerror(errno);
        return false;
      }
      r.moved += static_cast<uint64_t>(n);
      if (!c.sends && r.moved == 8) {
        std::memcpy(&r.length, r.header, 8);
        if (r.length > r.capacity) {
          c.error =
              "a message of " + std::to_string(r.length) + " bytes for a receive of " + std::to_string(r.capacity);
          return false;
        }
      }
    }
    r.done = true;
    c.queue.pop_front();
  }
  return true;
}

ncclResult_t net_init(void** ctx, uint64_t, NetCommConfig*, Logger log, ProfilerCallback) {
  set_logger(log);
  *ctx = nullptr;
  return ncclSuccess;
}

ncclResult_t net_devices(int* ndev) {
  const PluginEnv& env = plugin_env();
  *ndev = env.address ? 1 : 0;
  if (!env.address)
    log_line(kLogWarn, "inagg: the plugin is off (NCCL uses its own networks): %s", env.why_no_address.c_str());
  return ncclSuccess;
}

ncclResult_t net_properties(int dev, PropertiesV11* p) {
  if (dev != 0) return fail(ncclInvalidArgument, "device " + std::to_string(dev) + " does not exist (one: 0)");
  std::memset(p, 0, sizeof *p);
  static char name[] = "inagg-tcp";
  p->name = name;
  p->guid = 0x696e616774;
  p->ptr_support = kPtrHost;
  p->speed = 10000;
  p->port = 0;
  p->max_comms = 65536;
  p->max_recvs = 1;
  p->vprops.ndevs = 1;
  p->max_p2p_bytes = 1ul << 31;
  p->max_coll_bytes = 1ul << 31;
  p->max_multi_request_size = 1;
  return ncclSuccess;
}

ncclResult_t net_listen(void*, int dev, void* handle, void** listen_comm) {
  const PluginEnv& env = plugin_env();
  if (dev != 0 || !env.address) return fail(ncclInvalidUsage, "listen: " + env.why_no_address);
  NetHandle h{kNetMagic, *env.address, 0};
  std::string why;
  const int fd = listen_tcp(*env.address, &h.port, &why);
  if (fd < 0) return fail(ncclSystemError, why);
  std::memset(handle, 0, kHandleBytes);
  std::memcpy(handle, &h, sizeof h);
  *listen_comm = new NetListen{fd};
  return ncclSuccess;
}

ncclResult_t net_connect(void*, int, void* handle, void** send_comm, NetDeviceHandle**) {
  NetHandle h;
  std::memcpy(&h, handle, sizeof h);
  if (h.magic != kNetMagic) return fail(ncclInvalidArgument, "connect: the handle is not inagg's");
  std::string why;
  const int fd =
      connect_tcp(h.address, h.port, client::now_ns() + static_cast<uint64_t>(plugin_env().timeout_s * 1e9), &why);
  if (fd < 0) return fail(ncclSystemError, why);
  *send_comm = new Connection{fd, true, {}, {}};
  return ncclSuccess;
}

ncclResult_t net_accept(void* listen_comm, void** recv_comm, NetDeviceHandle**) {
  *recv_comm = nullptr;
  const int fd = ::accept4(static_cast<NetListen*>(listen_comm)->fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EINTR) return ncclSuccess;  // not yet: NCCL calls again
    return fail(ncclSystemError, std::string("accept: ") + std::strerror(errno));
  }
  *recv_comm = new Connection{fd, false, {}, {}};
  return ncclSuccess;
}

ncclResult_t net_reg_mr(void*, void*, size_t, int type, void** mhandle) {
  *mhandle = nullptr;
  if (type != kPtrHost)
    return fail(ncclInvalidUsage,
                "regMr of a CUDA buffer refused: host memory only (NCCL_PTR_HOST); GPU buffers are not "
                "supported yet");
  static int host;
  *mhandle = &host;
  return ncclSuccess;
}

ncclResult_t net_reg_mr_dma_buf(void*, void*, size_t, int, uint64_t, int, void** mhandle) {
  *mhandle = nullptr;
  return fail(ncclInvalidUsage, "regMrDmaBuf refused: host memory only (NCCL_PTR_HOST)");
}

ncclResult_t net_dereg_mr(void*, void*) { return ncclSuccess; }

ncclResult_t post(Connection& c, uint8_t* data, uint64_t size, void** request) {
  auto* r = new NetRequest();
  r->connection = &c;
  r->data = data;
  r->capacity = size;
  if (c.sends) {
    r->length = size;
    std::memcpy(r->header, &size, 8);
  }
  c.queue.push_back(r);
  *request = r;
  if (!progress(c)) return fail(ncclRemoteError, "the connection failed: " + c.error);
  return ncclSuccess;
}

ncclResult_t net_isend(void* send_comm, void* data, size_t size, int, void*, void*, void** request) {
  return post(*static_cast<Connection*>(send_comm), static_cast<uint8_t*>(data), size, request);
}

ncclResult_t net_irecv(void* recv_comm, int n, void** data, size_t* sizes, int*, void**, void**, void** request) {
  if (n != 1) return fail(ncclInvalidArgument, "irecv of " + std::to_string(n) + " buffers (maxRecvs is 1)");
  return post(*static_cast<Connection*>(recv_comm), static_cast<uint8_t*>(data[0]), sizes[0], request);
}

ncclResult_t net_iflush(void*, int, void**, int*, void**, void** request) {
  *request = nullptr;  // host memory: nothing to flush
  return ncclSuccess;
}

ncclResult_t net_test(void* request, int* done, int* sizes) {
  auto* r = static_cast<NetRequest*>(request);
  if (!r->done && !progress(*r->connection))
    return fail(ncclRemoteError, "the connection failed: " + r->connection->error);
  *done = r->done ? 1 : 0;
  if (r->done) {
    if (sizes) *sizes = static_cast<int>(r->length);
    delete r;
  }
  return ncclSuccess;
}

ncclResult_t net_close(void* comm) {
  std::unique_ptr<Connection> c(static_cast<Connection*>(comm));
  for (NetRequest* r : c->queue) delete r;
  if (c->fd >= 0) ::close(c->fd);
  return ncclSuccess;
}

ncclResult_t net_close_listen(void* listen_comm) {
  std::unique_ptr<NetListen> l(static_cast<NetListen*>(listen_comm));
  if (l->fd >= 0) ::close(l->fd);
  return ncclSuccess;
}

ncclResult_t net_get_device_mr(void*, void*, void** dptr) {
  *dptr = nullptr;
  return ncclSuccess;
}

ncclResult_t net_irecv_consumed(void*, int, void*) { return ncclSuccess; }

ncclResult_t net_finalize(void*) { return ncclSuccess; }

}  // namespace
}  // namespace inagg::ncclnet

using namespace inagg::ncclnet;

extern "C" {
[[gnu::visibility("default")]] NetV11 ncclNetPlugin_v11 = {
    .name = "inagg",
    .init = net_init,
    .devices = net_devices,
    .get_properties = net_properties,
    .listen = net_listen,
    .connect = net_connect,
    .accept = net_accept,
    .reg_mr = net_reg_mr,
    .reg_mr_dma_buf = net_reg_mr_dma_buf,
    .dereg_mr = net_dereg_mr,
    .isend = net_isend,
    .irecv = net_irecv,
    .iflush = net_iflush,
    .test = net_test,
    .close_send = net_close,
    .close_recv = net_close,
    .close_listen = net_close_listen,
    .get_device_mr = net_get_device_mr,
    .irecv_consumed = net_irecv_consumed,
    .make_vdevice = nullptr,  // NCCL then uses the physical device
    .finalize = net_finalize,
    .set_net_attr = nullptr,
};
}
