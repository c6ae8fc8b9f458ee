#include "inagg/util/pcap.hpp"

#include <pcap/pcap.h>

#include <cstdio>
#include <memory>

namespace inagg::util {
namespace {

struct PcapCloser {
  void operator()(pcap_t* p) const { pcap_close(p); }
};

}  // namespace

bool read_pcap(const std::string& path, std::vector<PcapRecord>* records, std::string* error) {
  records->clear();
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  std::unique_ptr<pcap_t, PcapCloser> p(
      pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, errbuf));
  if (!p) {
    const std::string why = errbuf;
    if (why.find("unknown file format") != std::string::npos || why.find("truncated dump file") != std::string::npos)
      *error = "'" + path + "' is not a pcap or pcapng capture (" + why + ")";
    else
      *error = "cannot open pcap file '" + path + "': " + why;
    return false;
  }
  if (pcap_datalink(p.get()) != DLT_EN10MB) {
    *error =
        "'" + path + "' has link type " + std::to_string(pcap_datalink(p.get())) + " (" +
        (pcap_datalink_val_to_name(pcap_datalink(p.get())) ? pcap_datalink_val_to_name(pcap_datalink(p.get())) : "?") +
        "); only Ethernet (1) is supported";
    return false;
  }
  for (;;) {
    pcap_pkthdr* hdr = nullptr;
    const u_char* data = nullptr;
    const int rc = pcap_next_ex(p.get(), &hdr, &data);
    if (rc == PCAP_ERROR_BREAK) break;  // end of file
    if (rc != 1) {
      *error = "'" + path + "' is damaged at record " + std::to_string(records->size()) + ": " + pcap_geterr(p.get());
      return false;
    }
    PcapRecord r;
    // With nanosecond precision requested, libpcap scales tv_usec to nanoseconds.
    r.ts_ns = static_cast<uint64_t>(hdr->ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(hdr->ts.tv_usec);
    r.orig_len = hdr->len;
    r.data.assign(data, data + hdr->caplen);
    records->push_back(std::move(r));
  }
  return true;
}

PcapWriter::~PcapWriter() { close(); }

bool PcapWriter::open(const std::string& path, std::string* error) {
  close();
  failed_ = false;
  written_ = 24;  // the file header
  skipped_ = errors_ = 0;
  dead_ = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, 65535, PCAP_TSTAMP_PRECISION_NANO);
  if (dead_ == nullptr) {
    *error = "libpcap could not set up a capture writer";
    return false;
  }
  dumper_ = pcap_dump_open(dead_, path.c_str());
  if (dumper_ == nullptr) {
    *error = "cannot create pcap file '" + path + "': " + pcap_geterr(dead_);
    pcap_close(dead_);
    dead_ = nullptr;
    return false;
  }
  return true;
}

bool PcapWriter::write(const uint8_t* data, size_t len, uint64_t ts_ns) {
  if (dumper_ == nullptr) return false;
  const uint64_t record = 16 + (len > 65535 ? 65535 : len);  // pcap record header + data
  if (limit_ && written_ + record > limit_) {
    ++skipped_;
    return false;
  }
  written_ += record;
  pcap_pkthdr hdr{};
  hdr.ts.tv_sec = static_cast<time_t>(ts_ns / 1000000000ull);
  hdr.ts.tv_usec = static_cast<suseconds_t>(ts_ns % 1000000000ull);  // nanoseconds: the file is nanosecond
  hdr.caplen = static_cast<uint32_t>(len > 65535 ? 65535 : len);
  hdr.len = static_cast<uint32_t>(len);
  pcap_dump(reinterpret_cast<u_char*>(dumper_), &hdr, data);
  if (std::ferror(pcap_dump_file(dumper_))) {  // pcap_dump itself reports nothing
    failed_ = true;
    ++errors_;
    return false;
  }
  return true;
}

bool PcapWriter::close() {
  if (dumper_ != nullptr) {
    if (pcap_dump_flush(dumper_) != 0) failed_ = true;
    pcap_dump_close(dumper_);
    dumper_ = nullptr;
  }
  if (dead_ != nullptr) {
    pcap_close(dead_);
    dead_ = nullptr;
  }
  return !failed_;
}

}  // namespace inagg::util
