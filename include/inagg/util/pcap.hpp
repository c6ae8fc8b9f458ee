// Capture files through libpcap: pcap and pcapng (what dpdk-dumpcap and Wireshark write) are read
// whole; pcap is written record by record (libpcap writes no pcapng). Ethernet link type only.
// Used by tests, tools and the appliance's optional capture; never on the fast path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct pcap;         // libpcap's pcap_t
struct pcap_dumper;  // libpcap's pcap_dumper_t

namespace inagg::util {

struct PcapRecord {
  uint64_t ts_ns = 0;
  uint32_t orig_len = 0;  // length on the wire; > data.size() when the capture was cut
  std::vector<uint8_t> data;
};

// Reads every record of a pcap (micro- or nanosecond, either byte order) or pcapng file. On failure
// returns false and sets *error to a sentence naming the file and the problem.
bool read_pcap(const std::string& path, std::vector<PcapRecord>* records, std::string* error);

class PcapWriter {
 public:
  PcapWriter() = default;
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // Creates (truncates) `path` and writes the file header; snaplen 65535, nanosecond timestamps.
  bool open(const std::string& path, std::string* error);
  // False when the record was not written: past the size limit (counted in skipped()) or a write
  // error (counted in errors(); the file is then incomplete).
  bool write(const uint8_t* data, size_t len, uint64_t ts_ns);
  bool close();  // flushes; false if any write failed
  bool is_open() const { return dumper_ != nullptr; }
  // At most this many bytes in the file (header and records; 0: no limit): later records are
  // skipped and counted, so a forgotten capture cannot fill the disk.
  void set_limit(uint64_t bytes) { limit_ = bytes; }
  uint64_t skipped() const { return skipped_; }
  uint64_t errors() const { return errors_; }

 private:
  struct pcap* dead_ = nullptr;  // the link type and precision the dumper writes
  struct pcap_dumper* dumper_ = nullptr;
  bool failed_ = false;
  uint64_t limit_ = 0, written_ = 0, skipped_ = 0, errors_ = 0;
};

}  // namespace inagg::util
