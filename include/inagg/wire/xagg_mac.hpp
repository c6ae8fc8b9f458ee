// The XDP tier's packet MAC (inagg/wire/xagg.h): SipHash-2-4 under the job's 128-bit key, for the
// workers' client and the tests; the heads compute the same in BPF (src/xdp/bpf/xagg_mac.h).
//
// SipHash-2-4, not SipHash-1-3: 2-4 is the variant the paper proposes and analyses as a MAC,
// whose output an attacker sees (here it travels in every packet); 1-3 was chosen elsewhere for
// hash tables, whose output stays inside the process, and keeps a smaller margin. What 2-4 costs
// a head is measured by bench/run xdp (docs/xdp-tier.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "inagg/wire/xagg.h"

namespace inagg::wire {

// SipHash-2-4 of `len` bytes at `data` under the key k0 (key bytes 0-7), k1 (8-15), written from
// the paper's definition (Aumasson & Bernstein, "SipHash: a fast short-input PRF", 2012).
uint64_t siphash24(uint64_t k0, uint64_t k1, const void* data, size_t len);

struct XaggKey {
  std::array<uint8_t, XAGG_KEY_BYTES> bytes{};
  uint64_t k0() const;
  uint64_t k1() const;
};

// Where the workers find the key when no --xdp-key-file is given.
inline constexpr const char* kXaggKeyEnv = "INAGG_XDP_KEY";

// 32 hex digits; nullopt for anything else.
std::optional<XaggKey> parse_xagg_key(std::string_view hex);
// A job's key from $INAGG_XDP_KEY (when env_name is given and the variable is set) or the first
// line of `path`, a private file (util::load_secret's checks: regular, the user's or root's, no
// permission for group or others). False with *error saying what to change.
bool load_xagg_key(const char* env_name, const std::string& path, XaggKey* key, std::string* error);
// Writes a fresh random key to a new private file (mode 0600; an existing file is left alone).
bool make_xagg_key_file(const std::string& path, std::string* error);

// The MAC of a tier packet: `packet` is the xagg_hdr and its values (len bytes, the UDP payload).
// The header's mac field counts as zero, whatever it holds.
uint64_t xagg_mac(const XaggKey& key, const uint8_t* packet, size_t len);
// Writes the MAC into the packet's header.
void xagg_sign(const XaggKey& key, uint8_t* packet, size_t len);
// True when the header's mac field holds the packet's MAC (compared in constant time).
bool xagg_verify(const XaggKey& key, const uint8_t* packet, size_t len);

}  // namespace inagg::wire
