#include <cctype>

#include "version.hpp"

namespace inagg::apps {

std::string format_version_line(std::string_view program, std::string_view describe, std::string_view project_version) {
  std::string line = std::string(program) + " ";
  std::string_view v = describe;
  if (v.size() > 1 && v[0] == 'v' && std::isdigit(static_cast<unsigned char>(v[1]))) v.remove_prefix(1);
  // A release tag's describe starts with its X.Y.Z; a commit id (git describe --always with no
  // tag) is hexadecimal and has no dot.
  const bool from_tag =
      !v.empty() && std::isdigit(static_cast<unsigned char>(v[0])) && v.find('.') != std::string_view::npos;
  if (from_tag) return line.append(v);
  line.append(project_version);
  if (!describe.empty() && describe != project_version) line.append(" (git ").append(describe).append(")");
  return line;
}

}  // namespace inagg::apps
