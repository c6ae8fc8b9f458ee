// HMAC-SHA256 and SHA-256 (OpenSSL's libcrypto) and what the authenticated exchanges built on it need: fresh
// random nonces, hex text, and a comparison whose time does not depend on where two MACs differ.
// Used by the ranks' rendezvous (client/rendezvous.hpp) and the control socket's challenge-response
// (control/socket.hpp): a peer proves it holds a secret by MACing a nonce the other side has just
// chosen, so nothing that crosses the wire can be replayed on another connection.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace inagg::util {

inline constexpr size_t kHmacBytes = 32;   // SHA-256
inline constexpr size_t kNonceBytes = 16;  // 128 random bits per connection

// HMAC-SHA256(key, message) as 64 lower-case hex digits.
std::string hmac_sha256_hex(std::string_view key, std::string_view message);
// SHA-256(message) as 64 lower-case hex digits (a digest others compare: collisions cannot be made).
std::string sha256_hex(std::string_view message);
// `bytes` random bytes from the OS's CSPRNG as hex; empty when none could be had (the caller
// refuses the connection then, never falls back to a predictable nonce).
std::string random_hex(size_t bytes = kNonceBytes);
// Constant time in the contents: true when both are equal and non-empty.
bool equal_constant_time(std::string_view a, std::string_view b);

// A secret from the environment variable `name` or, when that is unset, the first line of `path`
// (surrounding whitespace dropped). The file must be a regular file owned by the user running us
// (or root) with no permission for group or others; it is opened once and checked through that
// descriptor (no window between the check and the read). At least 16 characters. False with
// *error saying what to change.
bool load_secret(const char* env_name, const std::string& path, std::string* secret, std::string* error);
// The whole text of such a file (the same checks), for files with more than one line.
bool read_private_file(const std::string& path, std::string* text, std::string* error);

}  // namespace inagg::util
