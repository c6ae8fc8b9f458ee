// What every tool prints for --version: the project's version and, when it was built from a git
// checkout, `git describe` of that tree at build time (meson's vcs_tag; a build from a tarball
// has the project version alone).
#pragma once

#include <string>

namespace inagg::apps {

// "inagg 0.1.0 (git 58b8033-dirty)" or "inagg 0.1.0".
std::string version_line(const char* program);
// The project's version ("0.1.0") and `git describe` of the tree it was built from (the version
// again where there was no checkout): inagg_build_info's labels.
std::string project_version();
std::string build_revision();

}  // namespace inagg::apps
