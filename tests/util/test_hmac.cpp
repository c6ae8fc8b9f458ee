// HMAC-SHA256 against RFC 4231's test vectors, nonces, the constant-time comparison and the
// secret-file checks (owner, mode, the environment first).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "inagg/util/hmac.hpp"

namespace inagg::util {
namespace {

TEST(Hmac, Rfc4231Vectors) {
  // Test case 1: key 20 x 0x0b, "Hi There".
  EXPECT_EQ(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: key "Jefe".
  EXPECT_EQ(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than the block (131 x 0xaa).
  EXPECT_EQ(hmac_sha256_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(Hmac, NoncesAreFreshAndHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string n = random_hex();
    ASSERT_EQ(n.size(), 2 * kNonceBytes);
    EXPECT_EQ(n.find_first_not_of("0123456789abcdef"), std::string::npos) << n;
    EXPECT_TRUE(seen.insert(n).second) << "nonce repeated: " << n;
  }
}

TEST(Hmac, ConstantTimeComparison) {
  EXPECT_TRUE(equal_constant_time("abcd", "abcd"));
  EXPECT_FALSE(equal_constant_time("abcd", "abce"));
  EXPECT_FALSE(equal_constant_time("abcd", "abc"));
  EXPECT_FALSE(equal_constant_time("", ""));
}

struct TempFile {
  std::string path;
  TempFile(const std::string& text, mode_t mode) {
    char tmpl[] = "/tmp/inagg_secret_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    path = tmpl;
    EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::fchmod(fd, mode);
    ::close(fd);
  }
  ~TempFile() { ::unlink(path.c_str()); }
};

TEST(Hmac, SecretFromAPrivateFileOrTheEnvironment) {
  std::string s, err;
  const TempFile good("  0123456789abcdefXYZ \nsecond line\n", 0600);
  ::unsetenv("INAGG_TEST_SECRET");
  ASSERT_TRUE(load_secret("INAGG_TEST_SECRET", good.path, &s, &err)) << err;
  EXPECT_EQ(s, "0123456789abcdefXYZ");

  const TempFile open_to_all("0123456789abcdefXYZ\n", 0644);
  EXPECT_FALSE(load_secret("INAGG_TEST_SECRET", open_to_all.path, &s, &err));
  EXPECT_NE(err.find("chmod 600"), std::string::npos) << err;

  const TempFile short_one("short\n", 0600);
  EXPECT_FALSE(load_secret(nullptr, short_one.path, &s, &err));
  EXPECT_NE(err.find("at least 16"), std::string::npos) << err;

  EXPECT_FALSE(load_secret(nullptr, "/nonexistent/secret", &s, &err));
  EXPECT_NE(err.find("cannot read the secret file"), std::string::npos) << err;

  // A file of another user (neither us nor root) is not trusted.
  if (::geteuid() == 0) {
    const TempFile foreign("0123456789abcdefXYZ\n", 0600);
    ASSERT_EQ(::chown(foreign.path.c_str(), 65534, 65534), 0);
    EXPECT_FALSE(load_secret(nullptr, foreign.path, &s, &err));
    EXPECT_NE(err.find("belongs to uid 65534"), std::string::npos) << err;
  }

  // A symbolic link is not followed (the file checked is the file read).
  const std::string link = good.path + ".link";
  ASSERT_EQ(::symlink(good.path.c_str(), link.c_str()), 0);
  EXPECT_FALSE(load_secret(nullptr, link, &s, &err));
  ::unlink(link.c_str());

  // The environment comes first.
  ::setenv("INAGG_TEST_SECRET", "from-the-environment-0123", 1);
  ASSERT_TRUE(load_secret("INAGG_TEST_SECRET", open_to_all.path, &s, &err)) << err;
  EXPECT_EQ(s, "from-the-environment-0123");
  ::unsetenv("INAGG_TEST_SECRET");
}

}  // namespace
}  // namespace inagg::util
