// One NCCL rank, played by this process as NCCL drives a network plugin: dlopen the plugin, find
// its ncclNetPlugin_v11 and ncclCollNetPlugin_vN tables, and call them in NCCL's order: init with
// a logger, devices, getProperties, reduceSupport, listen, the handles exchanged (here through
// files in DIR), connect with every rank's, regMr, iallreduce / ireducescatter / iallgather with
// test until done, deregMr, closeColl, closeListen; and the point-to-point network: a message to
// the next rank. Every element is checked against a plain scalar loop over every rank's input
// (each rank computes all of them from the same formula); bad input must fail with a clear code
// and a logged sentence.
//
//   collnet_harness PLUGIN.so DIR RANKS RANK VERSION(11|10|9)
// The job's dtype and the appliance come from the plugin's environment (INAGG_DTYPE, ...).
// Exit 0: every check passed; 1: a check failed (said on stderr).
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "plugin_api.hpp"

using namespace inagg::ncclnet;

namespace {

unsigned g_rank = 0;
int g_failures = 0;
std::string g_last_warning;

void logger(LogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  char text[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (level == kLogWarn) g_last_warning = text;
  if (level <= kLogInfo)
    std::fprintf(stderr, "rank %u [plugin %s]: %s\n", g_rank, level == kLogWarn ? "WARN" : "INFO", text);
}

#define CHECK(cond, ...)                                      \
  do {                                                        \
    if (!(cond)) {                                            \
      std::fprintf(stderr, "rank %u: FAILED: ", g_rank);      \
      std::fprintf(stderr, __VA_ARGS__);                      \
      std::fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__); \
      ++g_failures;                                           \
    }                                                         \
  } while (0)

// CHECK, and the process ends when it failed (`cond` evaluated once: it often calls the plugin).
#define REQUIRE(cond, ...)   \
  do {                       \
    const bool ok_ = (cond); \
    CHECK(ok_, __VA_ARGS__); \
    if (!ok_) std::exit(1);  \
  } while (0)

// The job's dtype, by INAGG_DTYPE's name.
struct Type {
  ncclDataType_t nccl;
  size_t size;
  const char* name;
};
Type type_of(const std::string& name) {
  if (name == "fp16") return {ncclFloat16, 2, "fp16"};
  if (name == "bf16") return {ncclBfloat16, 2, "bf16"};
  if (name == "int32") return {ncclInt32, 4, "int32"};
  return {ncclFloat32, 4, "fp32"};
}

// Rank r's element i: quarters in [-4, 4) for the floating types (every sum of a few ranks exact in
// fp16, bf16 and fp32, whatever the order), integers of up to 2^26 for int32 (no overflow).
double value(unsigned r, size_t i, const Type& t) {
  const uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ (r + 1) * 0xc2b2ae3d27d4eb4full;
  const uint64_t m = h ^ (h >> 29);
  if (t.nccl == ncclInt32) return static_cast<double>(static_cast<int64_t>(m % (1u << 27)) - (1 << 26));
  return static_cast<double>(static_cast<int64_t>(m % 32) - 16) / 4;
}

uint16_t to_half(double v) {  // exact for the quarters above and their sums (|v| < 2048)
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  double a = std::fabs(v);
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  return static_cast<uint16_t>(sign | ((e + 14) << 10) | (static_cast<uint16_t>(std::ldexp(m, 11)) & 0x3ff));
}

void store(uint8_t* p, double v, const Type& t) {
  if (t.nccl == ncclInt32) {
    const int32_t x = static_cast<int32_t>(v);
    std::memcpy(p, &x, 4);
  } else if (t.nccl == ncclFloat32) {
    const float x = static_cast<float>(v);
    std::memcpy(p, &x, 4);
  } else if (t.nccl == ncclBfloat16) {
    const float x = static_cast<float>(v);
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    const uint16_t b = static_cast<uint16_t>(bits >> 16);  // exact: the values have 8 significant bits at most
    std::memcpy(p, &b, 2);
  } else {
    const uint16_t h = to_half(v);
    std::memcpy(p, &h, 2);
  }
}

// Rank r's input of `count` elements, starting at element `first` of its buffer.
std::vector<uint8_t> input(unsigned r, size_t first, size_t count, const Type& t) {
  std::vector<uint8_t> b(count * t.size);
  for (size_t i = 0; i < count; ++i) store(b.data() + i * t.size, value(r, first + i, t), t);
  return b;
}

// The sum of every rank's element i, by a plain loop, in the dtype's bytes.
std::vector<uint8_t> sum(unsigned ranks, size_t first, size_t count, const Type& t) {
  std::vector<uint8_t> b(count * t.size);
  for (size_t i = 0; i < count; ++i) {
    double s = 0;
    for (unsigned r = 0; r < ranks; ++r) s += value(r, first + i, t);
    store(b.data() + i * t.size, s, t);
  }
  return b;
}

// The first differing element, or -1.
long first_difference(const uint8_t* got, const uint8_t* want, size_t bytes, size_t element) {
  for (size_t i = 0; i < bytes; i += element)
    if (std::memcmp(got + i, want + i, element) != 0) return static_cast<long>(i / element);
  return -1;
}

// The handles through DIR: each rank writes its own, then reads every rank's.
std::vector<std::vector<char>> exchange(const std::string& dir, const std::string& what, unsigned ranks, unsigned rank,
                                        const char* handle) {
  const std::string mine = dir + "/" + what + "." + std::to_string(rank);
  {
    std::ofstream out(mine + ".tmp", std::ios::binary);
    out.write(handle, kHandleBytes);
  }
  REQUIRE(std::rename((mine + ".tmp").c_str(), mine.c_str()) == 0, "cannot write %s", mine.c_str());
  std::vector<std::vector<char>> all(ranks, std::vector<char>(kHandleBytes));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (unsigned r = 0; r < ranks; ++r) {
    const std::string path = dir + "/" + what + "." + std::to_string(r);
    while (true) {
      std::ifstream in(path, std::ios::binary);
      if (in && in.read(all[r].data(), kHandleBytes)) break;
      REQUIRE(std::chrono::steady_clock::now() < deadline, "rank %u's %s handle did not appear in %s within 60 s", r,
              what.c_str(), dir.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a file another process writes
    }
  }
  return all;
}

// The common table of v11 and v10/v9: the functions the collectives use.
struct Coll {
  ncclResult_t (*reg_mr)(void*, void*, size_t, int, void**);
  ncclResult_t (*dereg_mr)(void*, void*);
  ncclResult_t (*iallreduce)(void*, void*, void*, size_t, ncclDataType_t, ncclRedOp_t, void*, void*, void**);
  ncclResult_t (*iallgather)(void*, void*, int, Sge*, size_t, size_t, size_t, void*, void**);
  ncclResult_t (*ireducescatter)(void*, int, Sge*, void*, size_t, size_t, size_t, ncclDataType_t, ncclRedOp_t, void*,
                                 void**);
  ncclResult_t (*test)(void*, int*, int*);
};

// Tests `request` until it is done, as NCCL's proxy does; its size.
int wait_done(const Coll& c, void* request) {
  REQUIRE(request != nullptr, "the collective returned no request");
  int done = 0, size = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done) {
    REQUIRE(c.test(request, &done, &size) == ncclSuccess, "test failed: %s", g_last_warning.c_str());
    REQUIRE(done || std::chrono::steady_clock::now() < deadline, "a request not done within 60 s");
  }
  return size;
}

struct Buffers {
  std::vector<uint8_t> send, recv;
  void *send_mr = nullptr, *recv_mr = nullptr;
};

void allreduce(const Coll& c, void* comm, Buffers& b, unsigned ranks, unsigned rank, const Type& t, size_t count,
               bool in_place) {
  const std::vector<uint8_t> in = input(rank, 0, count, t), want = sum(ranks, 0, count, t);
  if (!in.empty()) std::memcpy(b.send.data(), in.data(), in.size());
  uint8_t* out = in_place ? b.send.data() : b.recv.data();
  void* request = nullptr;
  REQUIRE(c.iallreduce(comm, b.send.data(), out, count, t.nccl, ncclSum, b.send_mr, in_place ? b.send_mr : b.recv_mr,
                       &request) == ncclSuccess,
          "iallreduce of %zu %s failed: %s", count, t.name, g_last_warning.c_str());
  wait_done(c, request);
  const long d = first_difference(out, want.data(), want.size(), t.size);
  CHECK(d < 0, "iallreduce of %zu %s (%s): element %ld differs from the loop's sum", count, t.name,
        in_place ? "in place" : "out of place", d);
}

// A window of the whole n x per_rank buffer, as NCCL's CollNet passes it: [offset, offset + bytes).
struct Window {
  size_t offset, bytes, per_rank;
  size_t begin(unsigned r) const { return std::max(offset, r * per_rank); }
  size_t end(unsigned r) const { return std::min(offset + bytes, (r + 1) * per_rank); }
  size_t part(unsigned r) const { return end(r) > begin(r) ? end(r) - begin(r) : 0; }
};

// The window's bytes in two pieces of the scatter-gather list (the first `split` bytes, the rest).
int two_parts(Sge* parts, uint8_t* base, void* mr, size_t bytes, size_t split) {
  parts[0] = {mr, base, split};
  parts[1] = {mr, base + split, bytes - split};
  return 2;
}

void reduce_scatter(const Coll& c, void* comm, Buffers& b, unsigned ranks, unsigned rank, const Type& t,
                    size_t per_rank_count, size_t offset_count, size_t window_count) {
  const size_t es = t.size;
  const Window w{offset_count * es, window_count * es, per_rank_count * es};
  // This rank's input: the whole buffer's window (element offset_count on).
  const std::vector<uint8_t> in = input(rank, offset_count, window_count, t);
  if (!in.empty()) std::memcpy(b.send.data(), in.data(), in.size());
  Sge parts[2];
  const int n = two_parts(parts, b.send.data(), b.send_mr, w.bytes, (window_count / 3) * es);
  std::memset(b.recv.data(), 0xee, w.per_rank);
  void* request = nullptr;
  REQUIRE(c.ireducescatter(comm, n, parts, b.recv.data(), w.per_rank, w.offset, w.bytes, t.nccl, ncclSum, b.recv_mr,
                           &request) == ncclSuccess,
          "ireducescatter failed: %s", g_last_warning.c_str());
  const int got = wait_done(c, request);
  const size_t mine = w.part(rank);
  CHECK(static_cast<size_t>(got) == mine, "ireducescatter's size %d, this rank's part %zu", got, mine);
  const std::vector<uint8_t> want = sum(ranks, w.begin(rank) / es, mine / es, t);
  const long d = first_difference(b.recv.data(), want.data(), mine, es);
  CHECK(d < 0, "ireducescatter (window %zu+%zu of %u x %zu %s): element %ld of this rank's part differs", offset_count,
        window_count, ranks, per_rank_count, t.name, d);
}

void all_gather(const Coll& c, void* comm, Buffers& b, unsigned ranks, unsigned rank, const Type& t,
                size_t per_rank_count, size_t offset_count, size_t window_count) {
  const size_t es = t.size;
  const Window w{offset_count * es, window_count * es, per_rank_count * es};
  // This rank's input: its part of the window (NCCL passes its data from there on).
  const std::vector<uint8_t> in = input(rank, (w.begin(rank) - rank * w.per_rank) / es, w.part(rank) / es, t);
  if (!in.empty()) std::memcpy(b.send.data(), in.data(), in.size());
  std::memset(b.recv.data(), 0xee, w.bytes);
  Sge parts[2];
  const int n = two_parts(parts, b.recv.data(), b.recv_mr, w.bytes, (window_count / 2) * es + es);
  void* request = nullptr;
  REQUIRE(
      c.iallgather(comm, b.send.data(), n, parts, w.per_rank, w.offset, w.bytes, b.send_mr, &request) == ncclSuccess,
      "iallgather failed: %s", g_last_warning.c_str());
  const int got = wait_done(c, request);
  CHECK(static_cast<size_t>(got) == w.bytes, "iallgather's size %d, the window's %zu", got, w.bytes);
  for (unsigned r = 0; r < ranks; ++r) {
    if (!w.part(r)) continue;
    const std::vector<uint8_t> want = input(r, (w.begin(r) - r * w.per_rank) / es, w.part(r) / es, t);
    const long d = first_difference(b.recv.data() + (w.begin(r) - w.offset), want.data(), want.size(), es);
    CHECK(d < 0, "iallgather (window %zu+%zu of %u x %zu %s): rank %u's element %ld differs", offset_count,
          window_count, ranks, per_rank_count, t.name, r, d);
  }
}

// Bad input fails with the code and a sentence, and touches no other rank.
void bad_input(const Coll& c, void* comm, Buffers& b, const Type& t) {
  void* request = nullptr;
  g_last_warning.clear();
  CHECK(c.iallreduce(comm, b.send.data(), b.recv.data(), 16, t.nccl, ncclMax, b.send_mr, b.recv_mr, &request) ==
            ncclInvalidArgument,
        "iallreduce with ncclMax was not refused");
  CHECK(g_last_warning.find("only sums") != std::string::npos, "ncclMax's refusal says: '%s'", g_last_warning.c_str());
  const ncclDataType_t other = t.nccl == ncclFloat32 ? ncclInt32 : ncclFloat32;
  CHECK(c.iallreduce(comm, b.send.data(), b.recv.data(), 16, other, ncclSum, b.send_mr, b.recv_mr, &request) ==
            ncclInvalidArgument,
        "iallreduce of another dtype than the job's was not refused");
  CHECK(g_last_warning.find("INAGG_DTYPE") != std::string::npos, "the other dtype's refusal says: '%s'",
        g_last_warning.c_str());
  CHECK(c.iallreduce(comm, b.send.data(), b.recv.data(), 16, ncclFloat64, ncclSum, b.send_mr, b.recv_mr, &request) ==
            ncclInvalidArgument,
        "iallreduce of fp64 was not refused");
  std::vector<uint8_t> elsewhere(64);
  CHECK(c.iallreduce(comm, elsewhere.data(), b.recv.data(), 16, t.nccl, ncclSum, b.send_mr, b.recv_mr, &request) ==
            ncclInvalidArgument,
        "iallreduce of a buffer outside its registration was not refused");
  void* mr = nullptr;
  CHECK(c.reg_mr(comm, b.recv.data(), 64, kPtrCuda, &mr) == ncclInvalidUsage && mr == nullptr,
        "regMr of a CUDA buffer was not refused");
  CHECK(
      g_last_warning.find("CUDA") != std::string::npos && g_last_warning.find("not supported yet") != std::string::npos,
      "the CUDA refusal says: '%s'", g_last_warning.c_str());
}

// The point-to-point network: a message to the next rank, one from the previous.
void point_to_point(const NetV11& net, const std::string& dir, unsigned ranks, unsigned rank) {
  void* ctx = nullptr;
  NetCommConfig config{-1};
  REQUIRE(net.init(&ctx, 42, &config, logger, nullptr) == ncclSuccess, "net init");
  int ndev = 0;
  REQUIRE(net.devices(&ndev) == ncclSuccess && ndev == 1, "net devices: %d", ndev);
  PropertiesV11 p{};
  REQUIRE(net.get_properties(0, &p) == ncclSuccess && p.ptr_support == kPtrHost, "net properties");
  char handle[kHandleBytes];
  void* listen = nullptr;
  REQUIRE(net.listen(ctx, 0, handle, &listen) == ncclSuccess, "net listen: %s", g_last_warning.c_str());
  const auto all = exchange(dir, "net", ranks, rank, handle);
  void *send = nullptr, *recv = nullptr;
  NetDeviceHandle* dev = nullptr;
  while (!send || !recv) {
    if (!send)
      REQUIRE(net.connect(ctx, 0, const_cast<char*>(all[(rank + 1) % ranks].data()), &send, &dev) == ncclSuccess,
              "net connect: %s", g_last_warning.c_str());
    if (!recv) REQUIRE(net.accept(listen, &recv, &dev) == ncclSuccess, "net accept: %s", g_last_warning.c_str());
  }
  const size_t bytes = 3 << 20;  // more than a socket buffer: both sides must progress
  std::vector<uint8_t> out(bytes), in(bytes + 100, 0);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 7 + rank);
  void *mh_send = nullptr, *mh_recv = nullptr, *sreq = nullptr, *rreq = nullptr;
  REQUIRE(net.reg_mr(send, out.data(), bytes, kPtrHost, &mh_send) == ncclSuccess, "net regMr");
  REQUIRE(net.reg_mr(recv, in.data(), in.size(), kPtrHost, &mh_recv) == ncclSuccess, "net regMr");
  void* data[1] = {in.data()};
  size_t sizes[1] = {in.size()};
  int tags[1] = {7};
  REQUIRE(net.irecv(recv, 1, data, sizes, tags, &mh_recv, nullptr, &rreq) == ncclSuccess && rreq, "net irecv");
  REQUIRE(net.isend(send, out.data(), bytes, 7, mh_send, nullptr, &sreq) == ncclSuccess && sreq, "net isend");
  int sdone = 0, rdone = 0, ssize = 0, rsize = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!sdone || !rdone) {
    if (!sdone) REQUIRE(net.test(sreq, &sdone, &ssize) == ncclSuccess, "net test (send): %s", g_last_warning.c_str());
    if (!rdone) REQUIRE(net.test(rreq, &rdone, &rsize) == ncclSuccess, "net test (recv): %s", g_last_warning.c_str());
    REQUIRE(std::chrono::steady_clock::now() < deadline, "the point-to-point message did not arrive within 60 s");
  }
  const unsigned from = (rank + ranks - 1) % ranks;
  CHECK(rsize == static_cast<int>(bytes), "received %d bytes, sent %zu", rsize, bytes);
  bool same = true;
  for (size_t i = 0; i < bytes && same; ++i) same = in[i] == static_cast<uint8_t>(i * 7 + from);
  CHECK(same, "the point-to-point message from rank %u differs", from);
  net.dereg_mr(send, mh_send);
  net.dereg_mr(recv, mh_recv);
  net.close_send(send);
  net.close_recv(recv);
  net.close_listen(listen);
  net.finalize(ctx);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: collnet_harness PLUGIN.so DIR RANKS RANK VERSION(11|10|9)\n");
    return 2;
  }
  const std::string plugin = argv[1], dir = argv[2], version = argv[5];
  const unsigned ranks = static_cast<unsigned>(std::atoi(argv[3])), rank = static_cast<unsigned>(std::atoi(argv[4]));
  g_rank = rank;
  const char* dtype_env = std::getenv("INAGG_DTYPE");
  const Type t = type_of(dtype_env ? dtype_env : "fp32");

  void* lib = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib, "dlopen %s: %s", plugin.c_str(), dlerror());
  const auto* net = static_cast<const NetV11*>(dlsym(lib, "ncclNetPlugin_v11"));
  REQUIRE(net, "no ncclNetPlugin_v11: NCCL 2.28 would not load the library's CollNet without it");
  const std::string symbol = "ncclCollNetPlugin_v" + version;
  void* table = dlsym(lib, symbol.c_str());
  REQUIRE(table, "no %s", symbol.c_str());

  point_to_point(*net, dir, ranks, rank);

  // The version's own calls up to connect; then the functions both layouts share.
  Coll c{};
  void* ctx = nullptr;
  char handle[kHandleBytes];
  void* listen = nullptr;
  void* comm = nullptr;
  int ndev = 0;
  ncclResult_t (*close_coll)(void*) = nullptr;
  ncclResult_t (*close_listen)(void*) = nullptr;
  ncclResult_t (*reduce_support)(ncclDataType_t, ncclRedOp_t, int*) = nullptr;
  ncclResult_t (*connect)(void**, int, int, void*, void**) = nullptr;
  if (version == "11") {
    const auto* v = static_cast<const CollNetV11*>(table);
    REQUIRE(std::strcmp(v->name, "inagg") == 0, "name %s", v->name);
    REQUIRE(v->init(&ctx, 0x1234, logger) == ncclSuccess, "init");
    REQUIRE(v->devices(&ndev) == ncclSuccess && ndev == 1, "devices: %d (%s)", ndev, g_last_warning.c_str());
    PropertiesV11 p{};
    REQUIRE(v->get_properties(0, &p) == ncclSuccess, "getProperties");
    CHECK(p.ptr_support == kPtrHost && p.max_recvs == 1 && std::strcmp(p.name, "inagg") == 0,
          "properties: ptrSupport %d", p.ptr_support);
    REQUIRE(v->listen(ctx, 0, handle, &listen) == ncclSuccess, "listen: %s", g_last_warning.c_str());
    c = {v->reg_mr, v->dereg_mr, v->iallreduce, v->iallgather, v->ireducescatter, v->test};
    close_coll = v->close_coll, close_listen = v->close_listen, reduce_support = v->reduce_support,
    connect = v->connect;
  } else {
    const auto* v = static_cast<const CollNetV10*>(table);
    REQUIRE(v->init(logger) == ncclSuccess, "init");
    REQUIRE(v->devices(&ndev) == ncclSuccess && ndev == 1, "devices: %d (%s)", ndev, g_last_warning.c_str());
    PropertiesV10 p{};
    REQUIRE(v->get_properties(0, &p) == ncclSuccess, "getProperties");
    CHECK(p.ptr_support == kPtrHost, "properties: ptrSupport %d", p.ptr_support);
    REQUIRE(v->listen(0, handle, &listen) == ncclSuccess, "listen: %s", g_last_warning.c_str());
    c = {v->reg_mr, v->dereg_mr, v->iallreduce, v->iallgather, v->ireducescatter, v->test};
    close_coll = v->close_coll, close_listen = v->close_listen, reduce_support = v->reduce_support,
    connect = v->connect;
  }
  // reduceSupport: the job's dtype summed, nothing else.
  for (const Type& other : {type_of("fp32"), type_of("fp16"), type_of("bf16"), type_of("int32")}) {
    int supported = -1;
    REQUIRE(reduce_support(other.nccl, ncclSum, &supported) == ncclSuccess, "reduceSupport");
    CHECK(supported == (other.nccl == t.nccl ? 1 : 0), "reduceSupport(%s, sum) = %d with the job's %s", other.name,
          supported, t.name);
  }
  int supported = -1;
  reduce_support(t.nccl, ncclMax, &supported);
  CHECK(supported == 0, "reduceSupport(%s, max) = %d", t.name, supported);

  const auto all = exchange(dir, "collnet", ranks, rank, handle);
  std::vector<void*> handles;
  for (const auto& h : all) handles.push_back(const_cast<char*>(h.data()));
  REQUIRE(
      connect(handles.data(), static_cast<int>(ranks), static_cast<int>(rank), listen, &comm) == ncclSuccess && comm,
      "connect: %s", g_last_warning.c_str());

  const size_t most = 300000;  // elements: a few of the transport's 64 KiB messages and pieces past chunk_bytes
  Buffers b;
  b.send.resize(most * 4 * ranks);
  b.recv.resize(most * 4 * ranks);
  REQUIRE(c.reg_mr(comm, b.send.data(), b.send.size(), kPtrHost, &b.send_mr) == ncclSuccess, "regMr");
  REQUIRE(c.reg_mr(comm, b.recv.data(), b.recv.size(), kPtrHost, &b.recv_mr) == ncclSuccess, "regMr");

  for (const size_t count : {size_t{1}, size_t{1000}, most}) {
    allreduce(c, comm, b, ranks, rank, t, count, false);
    allreduce(c, comm, b, ranks, rank, t, count, true);
  }
  const size_t per_rank = 40000;
  // The whole buffer, a window inside one rank's part, one across parts, and one of a few elements.
  const size_t windows[][2] = {
      {0, per_rank * ranks}, {per_rank / 4, per_rank / 2}, {per_rank / 2, per_rank * 3 / 2 + 7}, {per_rank - 3, 5}};
  for (const auto& w : windows) {
    reduce_scatter(c, comm, b, ranks, rank, t, per_rank, w[0], w[1]);
    all_gather(c, comm, b, ranks, rank, t, per_rank, w[0], w[1]);
  }
  bad_input(c, comm, b, t);
  // After the refusals the communicator still sums.
  allreduce(c, comm, b, ranks, rank, t, 1000, false);

  REQUIRE(c.dereg_mr(comm, b.send_mr) == ncclSuccess && c.dereg_mr(comm, b.recv_mr) == ncclSuccess, "deregMr");
  REQUIRE(close_coll(comm) == ncclSuccess, "closeColl");
  REQUIRE(close_listen(listen) == ncclSuccess, "closeListen");
  if (version == "11") static_cast<const CollNetV11*>(table)->finalize(ctx);
  dlclose(lib);
  if (g_failures) return 1;
  std::printf("rank %u: every check passed (%s, collnet v%s)\n", rank, t.name, version.c_str());
  return 0;
}
