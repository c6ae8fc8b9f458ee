// The command line of the tools that take a command and its arguments (inagg-ctl, inagg-xdp):
// options anywhere, every other word positional. Throws boost::program_options::error on a bad
// option, as the caller's usage_error expects.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

namespace inagg::apps {

// Parses argv into `vm` and returns the positional words (the command first).
inline std::vector<std::string> parse_command_words(int argc, char** argv,
                                                    const boost::program_options::options_description& opts,
                                                    boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  po::options_description hidden;
  hidden.add_options()("words", po::value<std::vector<std::string>>(), "command and its arguments");
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("words", -1);
  po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
  po::notify(vm);
  return vm.count("words") ? vm["words"].as<std::vector<std::string>>() : std::vector<std::string>{};
}

}  // namespace inagg::apps
