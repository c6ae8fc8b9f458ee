// What every tool prints for --version. Built from a git checkout, the version is `git describe`
// of that tree at build time (meson's vcs_tag): from the release tag ("inagg 0.6.0", or
// "inagg 0.6.0-3-g1a2b3c4-dirty" three commits and an edit later), or, where no release tag is in
// the history, the project version with the commit ("inagg 0.6.0 (git 1a2b3c4)"). Without a
// checkout (a tarball, the package build's copy of the tree) it is the project version alone.
#pragma once

#include <string>
#include <string_view>

namespace inagg::apps {

// "PROGRAM VERSION" as above, for this build.
std::string version_line(const char* program);
// The line for a given `git describe` output (or the project version where there was no
// checkout): a describe from a release tag (vX.Y.Z or X.Y.Z) is the version, its leading v
// dropped; a bare commit is shown after the project version.
std::string format_version_line(std::string_view program, std::string_view describe, std::string_view project_version);
// The version --version prints, without the program's name or a "(git ...)" note ("0.6.0",
// "0.6.0-3-g1a2b3c4"): inagg_build_info's `version` label, so that both say the same.
std::string release_version();
// The project's version ("0.6.0") and `git describe` of the tree it was built from (the version
// again where there was no checkout): `revision` is inagg_build_info's other label.
std::string project_version();
std::string build_revision();

}  // namespace inagg::apps
