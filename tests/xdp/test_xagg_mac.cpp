// The tier's MAC on the C++ side (inagg/wire/xagg_mac.hpp): SipHash-2-4 against the paper's test
// vector and against OpenSSL's SipHash (a real library) on random keys and messages; signing and
// verifying packets; the job's key from text and from files. The BPF side is checked against this
// one in test_head_program.cpp.
#include <gtest/gtest.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "inagg/wire/xagg_mac.hpp"

namespace inagg::wire {
namespace {

// OpenSSL's SipHash-2-4 (EVP_MAC "SIPHASH", 8-byte output, little-endian as the reference writes it).
uint64_t openssl_siphash24(const uint8_t key[16], const uint8_t* msg, size_t len) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
  EVP_MAC_CTX* ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
  size_t size = 8;
  unsigned int c = 2, d = 4;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size),
                         OSSL_PARAM_construct_uint(OSSL_MAC_PARAM_C_ROUNDS, &c),
                         OSSL_PARAM_construct_uint(OSSL_MAC_PARAM_D_ROUNDS, &d), OSSL_PARAM_construct_end()};
  uint8_t out[8] = {};
  size_t out_len = 0;
  const bool ok = ctx && EVP_MAC_init(ctx, key, 16, params) == 1 && EVP_MAC_update(ctx, msg, len) == 1 &&
                  EVP_MAC_final(ctx, out, &out_len, sizeof out) == 1 && out_len == 8;
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  EXPECT_TRUE(ok) << "OpenSSL's SIPHASH failed";
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | out[i];
  return v;
}

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

TEST(SipHash24, ThePapersTestVector) {
  // Aumasson & Bernstein 2012, appendix A: key 00 01 .. 0f, message 00 01 .. 0e.
  uint8_t key[16], msg[15];
  for (int i = 0; i < 16; ++i) key[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 15; ++i) msg[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(siphash24(le64(key), le64(key + 8), msg, sizeof msg), 0xa129ca6149be45e5ull);
}

TEST(SipHash24, AgreesWithOpenSslOnRandomInput) {
  std::mt19937_64 rng(4792);
  std::vector<uint8_t> msg(4200);
  for (int round = 0; round < 2000; ++round) {
    uint8_t key[16];
    for (uint8_t& b : key) b = static_cast<uint8_t>(rng());
    // Every length up to 64 (each tail length, each count of whole words), then random ones.
    const size_t len = round < 65 ? static_cast<size_t>(round) : rng() % msg.size();
    for (size_t i = 0; i < len; ++i) msg[i] = static_cast<uint8_t>(rng());
    ASSERT_EQ(siphash24(le64(key), le64(key + 8), msg.data(), len), openssl_siphash24(key, msg.data(), len))
        << "length " << len;
  }
}

// A tier packet (header and values) as the client builds one.
std::vector<uint8_t> packet(unsigned count, std::mt19937_64& rng) {
  std::vector<uint8_t> p(sizeof(xagg_hdr) + 4 * count);
  const xagg_hdr h{XAGG_VERSION,
                   XAGG_DATA,
                   htons(7),
                   htons(3),
                   htons(static_cast<uint16_t>(count)),
                   htonl(static_cast<uint32_t>(rng())),
                   htonl(1),
                   {}};
  std::memcpy(p.data(), &h, sizeof h);
  for (size_t i = sizeof h; i < p.size(); ++i) p[i] = static_cast<uint8_t>(rng());
  return p;
}

TEST(XaggMac, IsSipHashOfTheHeaderWithItsMacZeroedAndTheValues) {
  std::mt19937_64 rng(1);
  XaggKey key;
  for (uint8_t& b : key.bytes) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> p = packet(8, rng);
  xagg_sign(key, p.data(), p.size());
  std::vector<uint8_t> msg = p;
  std::memset(msg.data() + offsetof(xagg_hdr, mac), 0, XAGG_MAC_BYTES);
  const uint64_t want = openssl_siphash24(key.bytes.data(), msg.data(), msg.size());
  EXPECT_EQ(le64(p.data() + offsetof(xagg_hdr, mac)), want) << "the mac field holds the result little-endian";
  EXPECT_TRUE(xagg_verify(key, p.data(), p.size()));
}

TEST(XaggMac, AnyChangedBitOrAnotherKeyFailsVerification) {
  std::mt19937_64 rng(2);
  for (int round = 0; round < 300; ++round) {
    XaggKey key;
    for (uint8_t& b : key.bytes) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> p = packet(4 * (1 + rng() % 256), rng);
    xagg_sign(key, p.data(), p.size());
    ASSERT_TRUE(xagg_verify(key, p.data(), p.size()));
    std::vector<uint8_t> flipped = p;
    const size_t bit = rng() % (8 * p.size());
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(xagg_verify(key, flipped.data(), flipped.size())) << "bit " << bit;
    XaggKey other = key;
    other.bytes[rng() % 16] ^= static_cast<uint8_t>(1u << (rng() % 8));
    EXPECT_FALSE(xagg_verify(other, p.data(), p.size()));
    EXPECT_FALSE(xagg_verify(key, p.data(), p.size() - 4)) << "a value cut off";
  }
  EXPECT_FALSE(xagg_verify(XaggKey{}, nullptr, 0));
}

TEST(XaggKey, ParsesExactly32HexDigits) {
  const std::optional<XaggKey> k = parse_xagg_key("000102030405060708090a0B0c0D0e0F");
  ASSERT_TRUE(k);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(k->bytes[i], i);
  EXPECT_EQ(k->k0(), 0x0706050403020100ull);
  EXPECT_EQ(k->k1(), 0x0f0e0d0c0b0a0908ull);
  EXPECT_FALSE(parse_xagg_key("000102030405060708090a0b0c0d0e0"));
  EXPECT_FALSE(parse_xagg_key("000102030405060708090a0b0c0d0e0f00"));
  EXPECT_FALSE(parse_xagg_key("000102030405060708090a0b0c0d0e0g"));
  EXPECT_FALSE(parse_xagg_key(""));
}

class KeyFile : public testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/inagg-xagg-key-XXXXXX";
    ASSERT_TRUE(::mkdtemp(dir));
    dir_ = dir;
    ::unsetenv(kXaggKeyEnv);
  }
  void TearDown() override {
    for (const char* f : {"/job.key", "/bad.key"}) ::unlink((dir_ + f).c_str());
    ::rmdir(dir_.c_str());
    ::unsetenv(kXaggKeyEnv);
  }
  std::string dir_;
};

TEST_F(KeyFile, MadeOnceReadBackAndNeverOverwritten) {
  const std::string path = dir_ + "/job.key";
  std::string err;
  ASSERT_TRUE(make_xagg_key_file(path, &err)) << err;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  XaggKey a, b;
  ASSERT_TRUE(load_xagg_key(kXaggKeyEnv, path, &a, &err)) << err;
  EXPECT_NE(a.bytes, XaggKey{}.bytes) << "128 random bits are never all zero";
  EXPECT_FALSE(make_xagg_key_file(path, &err));
  EXPECT_NE(err.find("a job's key is made once"), std::string::npos) << err;
  ASSERT_TRUE(load_xagg_key(kXaggKeyEnv, path, &b, &err)) << err;
  EXPECT_EQ(a.bytes, b.bytes) << "the refused second make left the file alone";
  // The environment first, as for the other secrets.
  ::setenv(kXaggKeyEnv, "ffeeddccbbaa99887766554433221100", 1);
  ASSERT_TRUE(load_xagg_key(kXaggKeyEnv, path, &b, &err)) << err;
  EXPECT_EQ(b.bytes[0], 0xff);
  EXPECT_EQ(b.bytes[15], 0x00);
}

TEST_F(KeyFile, RefusesWhatIsNoKeyOrNotPrivate) {
  const std::string path = dir_ + "/bad.key";
  std::ofstream(path) << "not a key at all, but long\n";
  ::chmod(path.c_str(), 0600);
  XaggKey k;
  std::string err;
  EXPECT_FALSE(load_xagg_key(kXaggKeyEnv, path, &k, &err));
  EXPECT_NE(err.find("is not 32 hex digits"), std::string::npos) << err;
  std::ofstream(path) << "000102030405060708090a0b0c0d0e0f\n";
  ::chmod(path.c_str(), 0644);
  EXPECT_FALSE(load_xagg_key(kXaggKeyEnv, path, &k, &err));
  EXPECT_NE(err.find("chmod 600"), std::string::npos) << err;
  EXPECT_FALSE(load_xagg_key(kXaggKeyEnv, dir_ + "/missing.key", &k, &err));
  EXPECT_NE(err.find("cannot read"), std::string::npos) << err;
}

}  // namespace
}  // namespace inagg::wire
