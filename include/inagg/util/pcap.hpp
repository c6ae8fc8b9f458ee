// Classic libpcap files (Ethernet link type), read whole or written record by record. Used by
// tests, tools and the appliance's optional capture; never on the fast path.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace inagg::util {

struct PcapRecord {
  uint64_t ts_ns = 0;
  uint32_t orig_len = 0;      // length on the wire; > data.size() when the capture was cut
  std::vector<uint8_t> data;
};

// Reads every record of a pcap file (micro- or nanosecond, either byte order). On failure returns
// false and sets *error to a sentence naming the file and the problem.
bool read_pcap(const std::string& path, std::vector<PcapRecord>* records, std::string* error);

class PcapWriter {
 public:
  PcapWriter() = default;
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // Creates (truncates) `path` and writes the file header; snaplen 65535, nanosecond timestamps.
  bool open(const std::string& path, std::string* error);
  bool write(const uint8_t* data, size_t len, uint64_t ts_ns);
  bool close();  // flushes; false if any write failed
  bool is_open() const { return file_ != nullptr; }

 private:
  std::FILE* file_ = nullptr;
  bool failed_ = false;
};

}  // namespace inagg::util
