// --version's line for each kind of `git describe` output the build can meet: a release tag (with
// or without a leading v, commits after it, an edited tree), a commit id where no release tag is
// in the history, and no checkout at all (vcs_tag's fallback, the project version itself).
#include <gtest/gtest.h>

#include "version.hpp"

using inagg::apps::format_version_line;

TEST(VersionLine, ReleaseTagIsTheVersion) {
  EXPECT_EQ(format_version_line("inagg", "v0.6.0", "0.6.0"), "inagg 0.6.0");
  EXPECT_EQ(format_version_line("inagg", "0.6.0", "0.6.0"), "inagg 0.6.0");
}

TEST(VersionLine, CommitsAndEditsAfterTheTagShow) {
  EXPECT_EQ(format_version_line("inagg-ctl", "v0.5.0-12-g1a2b3c4", "0.6.0"), "inagg-ctl 0.5.0-12-g1a2b3c4");
  EXPECT_EQ(format_version_line("inagg-xdp", "v0.6.0-3-g1a2b3c4-dirty", "0.6.0"), "inagg-xdp 0.6.0-3-g1a2b3c4-dirty");
  EXPECT_EQ(format_version_line("inagg", "v0.6.0-dirty", "0.6.0"), "inagg 0.6.0-dirty");
}

TEST(VersionLine, CommitWithoutReleaseTagFollowsTheProjectVersion) {
  EXPECT_EQ(format_version_line("inagg", "1a2b3c4", "0.6.0"), "inagg 0.6.0 (git 1a2b3c4)");
  EXPECT_EQ(format_version_line("inagg", "1a2b3c4-dirty", "0.6.0"), "inagg 0.6.0 (git 1a2b3c4-dirty)");
  // A hexadecimal id may start with a digit; it has no dot.
  EXPECT_EQ(format_version_line("inagg", "0123abc", "0.6.0"), "inagg 0.6.0 (git 0123abc)");
  // "v" followed by a letter is no release tag.
  EXPECT_EQ(format_version_line("inagg", "vendor-1", "0.6.0"), "inagg 0.6.0 (git vendor-1)");
}

TEST(VersionLine, NoCheckoutIsTheProjectVersion) {
  EXPECT_EQ(format_version_line("inagg-decode", "0.6.0", "0.6.0"), "inagg-decode 0.6.0");
  EXPECT_EQ(format_version_line("inagg-decode", "", "0.6.0"), "inagg-decode 0.6.0");
}
