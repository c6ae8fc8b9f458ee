// inagg-decode: prints the RoCEv2 headers of every packet in pcap files and checks each ICRC
// (tshark decodes RoCEv2 but does not verify the ICRC). Exit status 0 when every RoCEv2 packet is
// well formed and its ICRC verifies, 1 otherwise, 2 on a usage or file error.
#include <arpa/inet.h>

#include <boost/program_options.hpp>

#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "inagg/util/pcap.hpp"
#include "inagg/wire/icrc.hpp"
#include "inagg/wire/parse.hpp"
#include "version.hpp"

namespace po = boost::program_options;
using namespace inagg;

namespace {

std::string ip_text(const uint8_t* frame, const wire::Layout& l, bool src) {
  char buf[INET6_ADDRSTRLEN];
  const uint8_t* ip = frame + l.l3;
  if (l.ip == util::IpVersion::v4) return inet_ntop(AF_INET, ip + (src ? 12 : 16), buf, sizeof buf);
  return inet_ntop(AF_INET6, ip + (src ? 8 : 24), buf, sizeof buf);
}

struct Totals {
  size_t frames = 0, roce = 0, other = 0, malformed = 0, bad_icrc = 0;
};

void decode_one(size_t index, const util::PcapRecord& r, bool quiet, Totals& t) {
  ++t.frames;
  wire::Layout l;
  const wire::ParseStatus st = wire::parse_frame(r.data, l);
  const uint8_t* f = r.data.data();
  if (st != wire::ParseStatus::roce) {
    if (wire::is_malformed(st)) {
      ++t.malformed;
      std::printf("%5zu len=%-5zu MALFORMED %s: %s\n", index, r.data.size(),
                  std::string(wire::parse_status_name(st)).c_str(), std::string(wire::parse_status_text(st)).c_str());
    } else {
      ++t.other;
      if (!quiet)
        std::printf("%5zu len=%-5zu %s\n", index, r.data.size(), std::string(wire::parse_status_text(st)).c_str());
    }
    return;
  }
  ++t.roce;
  const uint32_t stored = wire::icrc_stored(f, l), computed = wire::icrc_compute(f, l);
  const bool ok = stored == computed;
  if (!ok) ++t.bad_icrc;
  if (quiet && ok) return;
  const wire::BthView bth = wire::bth_of(f, l);
  std::printf("%5zu len=%-5zu %s%s > %s %s dqpn=0x%06x psn=%u%s%s%s pad=%u payload=%u", index, r.data.size(),
              l.has_vlan ? ("vlan=" + std::to_string(l.vlan_tci & 0xfff) + " ").c_str() : "",
              ip_text(f, l, true).c_str(), ip_text(f, l, false).c_str(), std::string(l.info->name).c_str(),
              bth.dest_qp(), bth.psn(), bth.ack_req() ? " A" : "", bth.fecn() ? " FECN" : "", bth.becn() ? " BECN" : "",
              l.pad, l.payload_len);
  if (l.reth) {
    const wire::RethView reth = wire::reth_of(f, l);
    std::printf(" va=0x%" PRIx64 " rkey=0x%x dlen=%u", reth.va(), reth.rkey(), reth.dma_len());
  }
  if (l.immdt) std::printf(" imm=0x%08x", wire::immdt_of(f, l));
  if (l.aeth) {
    const wire::AethView aeth = wire::aeth_of(f, l);
    std::printf(" %s syndrome=0x%02x msn=%u",
                aeth.is_nak()       ? "NAK"
                : aeth.is_rnr_nak() ? "RNR-NAK"
                                    : "ACK",
                aeth.syndrome(), aeth.msn());
  }
  if (ok)
    std::printf(" icrc=0x%08x ok\n", stored);
  else
    std::printf(" icrc=0x%08x BAD (expected 0x%08x)\n", stored, computed);
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description opts("Usage: inagg-decode [options] FILE.pcap...\n\nOptions");
  opts.add_options()("help,h", "show this help")("version", "print the version and exit")(
      "quiet,q", "print only malformed packets, bad ICRCs and the totals")(
      "file", po::value<std::vector<std::string>>(), "pcap file(s) to decode");
  po::positional_options_description pos;
  pos.add("file", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "inagg-decode: " << e.what() << "\n" << opts;
    return 2;
  }
  if (vm.count("version")) {
    std::cout << apps::version_line("inagg-decode") << "\n";
    return 0;
  }
  if (vm.count("help") || !vm.count("file")) {
    std::cout << opts
              << "\nChecks every RoCEv2 packet's ICRC. Exit status: 0 all good, 1 a malformed packet or bad ICRC, 2 "
                 "usage or file error.\n";
    return vm.count("help") ? 0 : 2;
  }
  const bool quiet = vm.count("quiet") > 0;
  Totals t;
  for (const std::string& path : vm["file"].as<std::vector<std::string>>()) {
    std::vector<util::PcapRecord> recs;
    std::string err;
    if (!util::read_pcap(path, &recs, &err)) {
      std::cerr << "inagg-decode: " << err << "\n";
      return 2;
    }
    std::printf("== %s: %zu frames\n", path.c_str(), recs.size());
    for (size_t i = 0; i < recs.size(); ++i) decode_one(i, recs[i], quiet, t);
  }
  std::printf("frames=%zu roce=%zu other=%zu malformed=%zu bad_icrc=%zu crc32=%s\n", t.frames, t.roce, t.other,
              t.malformed, t.bad_icrc, std::string(wire::crc32_impl_name()).c_str());
  return (t.malformed || t.bad_icrc) ? 1 : 0;
}
