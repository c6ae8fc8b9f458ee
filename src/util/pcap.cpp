#include "inagg/util/pcap.hpp"

#include <cerrno>
#include <cstring>
#include <memory>

namespace inagg::util {
namespace {

constexpr uint32_t kMagicUsec = 0xa1b2c3d4;
constexpr uint32_t kMagicNsec = 0xa1b23c4d;
constexpr uint32_t kLinkTypeEthernet = 1;

uint32_t bswap32(uint32_t v) { return __builtin_bswap32(v); }

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

bool read_pcap(const std::string& path, std::vector<PcapRecord>* records, std::string* error) {
  records->clear();
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    *error = "cannot open pcap file '" + path + "': " + std::strerror(errno);
    return false;
  }
  uint32_t hdr[6];
  if (std::fread(hdr, sizeof hdr, 1, f.get()) != 1) {
    *error = "'" + path + "' is too short to be a pcap file";
    return false;
  }
  bool swap = false, nsec = false;
  if (hdr[0] == kMagicUsec || hdr[0] == kMagicNsec) {
    nsec = hdr[0] == kMagicNsec;
  } else if (bswap32(hdr[0]) == kMagicUsec || bswap32(hdr[0]) == kMagicNsec) {
    swap = true;
    nsec = bswap32(hdr[0]) == kMagicNsec;
  } else {
    *error = "'" + path + "' is not a classic pcap file (pcapng is not supported; convert it with editcap -F pcap)";
    return false;
  }
  auto fix = [swap](uint32_t v) { return swap ? bswap32(v) : v; };
  const uint32_t snaplen = fix(hdr[4]);
  if (fix(hdr[5]) != kLinkTypeEthernet) {
    *error = "'" + path + "' has link type " + std::to_string(fix(hdr[5])) + "; only Ethernet (1) is supported";
    return false;
  }
  const uint32_t max_len = snaplen > 0 && snaplen < (1u << 18) ? snaplen : (1u << 18);
  for (;;) {
    uint32_t rec[4];
    const size_t got = std::fread(rec, 1, sizeof rec, f.get());
    if (got == 0) break;
    if (got != sizeof rec) {
      *error = "'" + path + "' ends inside a record header (record " + std::to_string(records->size()) + ")";
      return false;
    }
    PcapRecord r;
    const uint32_t incl = fix(rec[2]);
    if (incl > max_len) {
      *error = "'" + path + "' record " + std::to_string(records->size()) + " claims " + std::to_string(incl) +
               " bytes, more than the snap length";
      return false;
    }
    r.ts_ns = static_cast<uint64_t>(fix(rec[0])) * 1000000000ull + fix(rec[1]) * (nsec ? 1ull : 1000ull);
    r.orig_len = fix(rec[3]);
    r.data.resize(incl);
    if (incl != 0 && std::fread(r.data.data(), incl, 1, f.get()) != 1) {
      *error = "'" + path + "' ends inside record " + std::to_string(records->size());
      return false;
    }
    records->push_back(std::move(r));
  }
  return true;
}

PcapWriter::~PcapWriter() { close(); }

bool PcapWriter::open(const std::string& path, std::string* error) {
  close();
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) {
    *error = "cannot create pcap file '" + path + "': " + std::strerror(errno);
    return false;
  }
  failed_ = false;
  const uint32_t hdr[6] = {kMagicNsec, 2u | 4u << 16, 0, 0, 65535, kLinkTypeEthernet};
  if (std::fwrite(hdr, sizeof hdr, 1, file_) != 1) {
    *error = "cannot write pcap header to '" + path + "': " + std::strerror(errno);
    failed_ = true;
    return false;
  }
  return true;
}

bool PcapWriter::write(const uint8_t* data, size_t len, uint64_t ts_ns) {
  if (file_ == nullptr) return false;
  const uint32_t incl = static_cast<uint32_t>(len > 65535 ? 65535 : len);
  const uint32_t rec[4] = {static_cast<uint32_t>(ts_ns / 1000000000ull), static_cast<uint32_t>(ts_ns % 1000000000ull),
                           incl, static_cast<uint32_t>(len)};
  if (std::fwrite(rec, sizeof rec, 1, file_) != 1 || (incl && std::fwrite(data, incl, 1, file_) != 1)) failed_ = true;
  return !failed_;
}

bool PcapWriter::close() {
  if (file_ == nullptr) return !failed_;
  if (std::fclose(file_) != 0) failed_ = true;
  file_ = nullptr;
  return !failed_;
}

}  // namespace inagg::util
