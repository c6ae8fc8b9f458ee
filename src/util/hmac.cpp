#include "inagg/util/hmac.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace inagg::util {
namespace {

std::string hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

std::string trimmed_first_line(const std::string& text) {
  const std::string line = text.substr(0, text.find('\n'));
  const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : line.substr(b, e - b + 1);
}

bool check_length(const std::string& secret, const std::string& where, std::string* error) {
  if (secret.size() >= 16) return true;
  *error = "the secret in " + where + " is " + std::to_string(secret.size()) +
           " characters; use at least 16 (e.g. head -c 24 /dev/urandom | base64)";
  return false;
}

}  // namespace

std::string hmac_sha256_hex(std::string_view key, std::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len))
    return {};
  return hex(mac, len);
}

std::string sha256_hex(std::string_view message) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(message.data(), message.size(), md, &len, EVP_sha256(), nullptr)) return {};
  return hex(md, len);
}

std::string random_hex(size_t bytes) {
  unsigned char buf[64];
  if (bytes > sizeof buf || RAND_bytes(buf, static_cast<int>(bytes)) != 1) return {};
  return hex(buf, bytes);
}

bool equal_constant_time(std::string_view a, std::string_view b) {
  return !a.empty() && a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool read_private_file(const std::string& path, std::string* text, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    *error = "cannot read the secret file '" + path + "': " + std::strerror(errno);
    return false;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = "the secret file '" + path + "' is not a regular file";
    return false;
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    *error = "the secret file '" + path + "' belongs to uid " + std::to_string(st.st_uid) + ", neither to us (uid " +
             std::to_string(::geteuid()) + ") nor to root: chown it";
    return false;
  }
  if (st.st_mode & 077) {
    *error = "the secret file '" + path + "' is readable by others than its owner: chmod 600 it";
    return false;
  }
  text->clear();
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = "cannot read the secret file '" + path + "': " + std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    text->append(buf, static_cast<size_t>(n));
    if (text->size() > (1u << 20)) {
      *error = "the secret file '" + path + "' is larger than 1 MiB";
      return false;
    }
  }
  return true;
}

bool load_secret(const char* env_name, const std::string& path, std::string* secret, std::string* error) {
  if (env_name) {
    if (const char* v = std::getenv(env_name); v && *v) {
      *secret = trimmed_first_line(v);
      return check_length(*secret, std::string("$") + env_name, error);
    }
  }
  if (path.empty()) {
    *error = std::string("no secret: set ") + (env_name ? std::string("$") + env_name + " or " : "") + "a secret file";
    return false;
  }
  std::string text;
  if (!read_private_file(path, &text, error)) return false;
  *secret = trimmed_first_line(text);
  return check_length(*secret, "'" + path + "'", error);
}

}  // namespace inagg::util
