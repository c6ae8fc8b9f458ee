// Loads tests/fixtures (made by scripts/gen-fixtures with scapy): the pcaps and the manifest of the
// fields each packet must decode to.
#pragma once

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "inagg/util/pcap.hpp"

namespace inagg::fixtures {

inline std::string fixtures_dir() {
  const char* d = std::getenv("INAGG_FIXTURES");
  return d ? d : "tests/fixtures";
}

struct FixturePacket {
  std::map<std::string, std::string> fields;
  std::vector<uint8_t> frame;

  bool has(const std::string& k) const { return fields.count(k) != 0; }
  uint64_t num(const std::string& k) const { return std::stoull(fields.at(k), nullptr, 0); }
  const std::string& str(const std::string& k) const { return fields.at(k); }
};

// Every packet of the manifest joined with its frame; throws on a missing or inconsistent fixture.
inline std::vector<FixturePacket> load_fixtures() {
  const std::string dir = fixtures_dir();
  std::ifstream in(dir + "/manifest.txt");
  if (!in) throw std::runtime_error("cannot open " + dir + "/manifest.txt: run scripts/gen-fixtures");
  std::map<std::string, std::vector<util::PcapRecord>> pcaps;
  std::vector<FixturePacket> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    FixturePacket p;
    std::istringstream ss(line);
    std::string kv;
    while (ss >> kv) {
      const auto eq = kv.find('=');
      p.fields[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    const std::string& file = p.str("file");
    if (!pcaps.count(file)) {
      std::string err;
      if (!util::read_pcap(dir + "/" + file, &pcaps[file], &err)) throw std::runtime_error(err);
    }
    const size_t index = p.num("index");
    if (index >= pcaps[file].size()) throw std::runtime_error("manifest names a missing packet in " + file);
    p.frame = pcaps[file][index].data;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace inagg::fixtures
