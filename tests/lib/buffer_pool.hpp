// A buffer pool for driving the engine outside the appliance: reference-counted buffers behind
// agg::BufferOps, so a leak, a double free or a reference to a freed buffer shows. Shared by the
// engine's unit tests (a broken rule fails the test) and its fuzzer (a broken rule aborts).
#pragma once

#include <cstring>
#include <set>
#include <vector>

#include "inagg/agg/engine.hpp"

namespace inagg::testlib {

class BufferPool {
 public:
  // Called with a sentence when the engine misuses a buffer; the caller decides what failing means.
  using OnMisuse = void (*)(const char* what);

  explicit BufferPool(OnMisuse on_misuse) : on_misuse_(on_misuse) {
    ops.ctx = this;
    ops.free = [](void* c, void* h) { static_cast<BufferPool*>(c)->unref(static_cast<Buffer*>(h)); };
    ops.ref = [](void* c, void* h) { static_cast<BufferPool*>(c)->ref(static_cast<Buffer*>(h)); };
    ops.alloc = [](void* c, uint16_t len) { return static_cast<BufferPool*>(c)->alloc(len); };
  }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool() {
    for (Buffer* b : live_) delete b;
  }

  agg::PacketRef alloc(uint16_t len) {
    if (fail_alloc) return {};
    auto* b = new Buffer;
    b->bytes.resize(len ? len : 1);
    live_.insert(b);
    return {b, b->bytes.data(), len};
  }
  // A received frame: a fresh buffer holding a copy of `frame`, as if it came in on `port`.
  agg::PacketRef wrap(const std::vector<uint8_t>& frame, uint16_t port = 0) {
    agg::PacketRef p = alloc(static_cast<uint16_t>(frame.size()));
    if (p.data == nullptr) return p;
    if (!frame.empty()) std::memcpy(p.data, frame.data(), frame.size());
    p.port = port;
    return p;
  }
  // The caller consumed a TX entry (it "sent" it): its bytes, and that reference dropped.
  std::vector<uint8_t> take(const agg::PacketRef& p) {
    std::vector<uint8_t> v(p.data, p.data + p.len);
    unref(static_cast<Buffer*>(p.handle));
    return v;
  }
  size_t live() const { return live_.size(); }

  agg::BufferOps ops;
  bool fail_alloc = false;  // alloc() returns an empty reference while set (out of buffers)

 private:
  struct Buffer {
    std::vector<uint8_t> bytes;
    int refs = 1;
  };
  void ref(Buffer* b) {
    if (!live_.count(b)) return on_misuse_("ref of a freed buffer");
    ++b->refs;
  }
  void unref(Buffer* b) {
    if (!live_.count(b)) return on_misuse_("free of a freed buffer");
    if (--b->refs == 0) {
      live_.erase(b);
      delete b;
    }
  }

  OnMisuse on_misuse_;
  std::set<Buffer*> live_;
};

}  // namespace inagg::testlib
