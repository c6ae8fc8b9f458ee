#include "inagg/wire/xagg_mac.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "inagg/util/hmac.hpp"

namespace inagg::wire {
namespace {

static_assert(sizeof(xagg_hdr) == 24 && offsetof(xagg_hdr, mac) == 16, "the MAC is the header's last 8 bytes");

constexpr uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct SipState {
  uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
  void absorb(uint64_t m) {  // c = 2 rounds per message word
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

uint64_t load_le64(const uint8_t* p) {
  uint64_t x = 0;
  for (int i = 7; i >= 0; --i) x = x << 8 | p[i];
  return x;
}

// SipHash-2-4 of `len` bytes, the 8-byte word at offset `zeroed` (a multiple of 8) read as zeros.
uint64_t siphash24_skipping(uint64_t k0, uint64_t k1, const uint8_t* in, size_t len, size_t zeroed) {
  // The initial state: the key xored with "somepseudorandomlygeneratedbytes".
  SipState s{k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull, k0 ^ 0x6c7967656e657261ull,
             k1 ^ 0x7465646279746573ull};
  const size_t whole = len / 8 * 8;
  for (size_t i = 0; i < whole; i += 8) s.absorb(i == zeroed ? 0 : load_le64(in + i));
  // The last word: the remaining 0-7 bytes, and len mod 256 in its top byte.
  uint64_t last = static_cast<uint64_t>(len & 0xff) << 56;
  for (size_t i = whole; i < len; ++i) last |= static_cast<uint64_t>(in[i]) << (8 * (i - whole));
  s.absorb(last);
  s.v2 ^= 0xff;  // d = 4 finalization rounds
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

}  // namespace

uint64_t siphash24(uint64_t k0, uint64_t k1, const void* data, size_t len) {
  return siphash24_skipping(k0, k1, static_cast<const uint8_t*>(data), len, SIZE_MAX);
}

uint64_t XaggKey::k0() const { return load_le64(bytes.data()); }
uint64_t XaggKey::k1() const { return load_le64(bytes.data() + 8); }

std::optional<XaggKey> parse_xagg_key(std::string_view hex) {
  if (hex.size() != 2 * XAGG_KEY_BYTES) return std::nullopt;
  XaggKey k;
  for (size_t i = 0; i < hex.size(); ++i) {
    const char c = hex[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return std::nullopt;
    k.bytes[i / 2] = static_cast<uint8_t>(k.bytes[i / 2] << 4 | d);
  }
  return k;
}

bool load_xagg_key(const char* env_name, const std::string& path, XaggKey* key, std::string* error) {
  std::string text, why;
  if (!util::load_secret(env_name, path, &text, &why)) {
    *error = "the XDP tier's job key: " + why;
    return false;
  }
  const std::optional<XaggKey> k = parse_xagg_key(text);
  if (!k) {
    const bool from_env = env_name && std::getenv(env_name) && *std::getenv(env_name);
    *error = "the XDP tier's job key in " + (from_env ? "$" + std::string(env_name) : "'" + path + "'") +
             " is not 32 hex digits (128 bits); `inagg-xdp key FILE` makes one";
    return false;
  }
  *key = *k;
  return true;
}

bool make_xagg_key_file(const std::string& path, std::string* error) {
  const std::string hex = util::random_hex(XAGG_KEY_BYTES);
  if (hex.size() != 2 * XAGG_KEY_BYTES) {
    *error = "no random bytes from the system's generator for the key";
    return false;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    *error = "cannot create the key file '" + path + "': " + std::strerror(errno) +
             (errno == EEXIST ? " (a job's key is made once: give every head and worker that file, or remove it)" : "");
    return false;
  }
  const std::string line = hex + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    *error = "cannot write the key file '" + path + "': " + std::strerror(err);
  }
  return ok;
}

uint64_t xagg_mac(const XaggKey& key, const uint8_t* packet, size_t len) {
  return siphash24_skipping(key.k0(), key.k1(), packet, len, offsetof(xagg_hdr, mac));
}

void xagg_sign(const XaggKey& key, uint8_t* packet, size_t len) {
  const uint64_t m = xagg_mac(key, packet, len);
  for (int i = 0; i < XAGG_MAC_BYTES; ++i) packet[offsetof(xagg_hdr, mac) + i] = static_cast<uint8_t>(m >> (8 * i));
}

bool xagg_verify(const XaggKey& key, const uint8_t* packet, size_t len) {
  if (len < sizeof(xagg_hdr)) return false;
  const uint64_t m = xagg_mac(key, packet, len);
  uint8_t want[XAGG_MAC_BYTES];
  for (int i = 0; i < XAGG_MAC_BYTES; ++i) want[i] = static_cast<uint8_t>(m >> (8 * i));
  return util::equal_constant_time(
      std::string_view(reinterpret_cast<const char*>(want), XAGG_MAC_BYTES),
      std::string_view(reinterpret_cast<const char*>(packet + offsetof(xagg_hdr, mac)), XAGG_MAC_BYTES));
}

}  // namespace inagg::wire
