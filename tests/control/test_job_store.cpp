// The state directory: jobs saved and loaded back identically with their lcore, removed with their
// job; a directory used by one appliance at a time, ours and writable by nobody else; leftovers of a
// write cut short cleared; a link planted at the temporary file's name never followed; files of
// format 1 (no lcore) still read; a file set aside kept and never loaded; a file inagg did not
// write exactly (cut short, edited, another format, a stranger's, a link) refuses the whole
// directory, naming it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "inagg/control/job_file.hpp"
#include "inagg/control/job_store.hpp"

namespace inagg::control {
namespace {

namespace fs = std::filesystem;

const char* kJob =
    "id = 7\ndtype = fp32\nworkers = 2\nmessage_bytes = 4096\npayload_bytes = 1024\nwindow = 4\n"
    "conn = 0, 10.0.0.1, 0x11, 10.0.0.2, 0x12, 0xfffffe\nconn = 1, 10.0.0.2, 0x13, 10.0.0.1, 0x14, 5\n";

class JobStoreTest : public ::testing::Test {
 protected:
  std::string dir;
  JobSpec job;

  void SetUp() override {
    char tmpl[] = "/tmp/inagg-state-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir = std::string(tmpl) + "/state";  // not there yet: open() creates it
    std::string err;
    auto j = parse_job(kJob, &err);
    ASSERT_TRUE(j) << err;
    job = *j;
  }
  void TearDown() override { fs::remove_all(fs::path(dir).parent_path()); }

  static std::string read(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  static void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  // `job` saved on lcore 1 by a store closed again: its file's path.
  std::string saved() {
    JobStore s;
    std::string err;
    EXPECT_TRUE(s.open(dir, &err)) << err;
    EXPECT_TRUE(s.save(job, 1, &err)) << err;
    return s.path_of(7);
  }
  // What load() says of the directory as it is now (it must refuse it).
  std::string refusal() {
    JobStore s;
    std::string err;
    EXPECT_TRUE(s.open(dir, &err)) << err;
    std::vector<SavedJob> jobs{{job, 1}};
    EXPECT_FALSE(s.load(&jobs, &err)) << "a bad state directory was loaded";
    EXPECT_EQ(jobs.size(), 1u) << "a refused load changed its output";
    return err;
  }
};

TEST_F(JobStoreTest, JobsComeBackAsTheyWereSavedAndGoWithTheirRemoval) {
  JobStore s;
  std::string err;
  ASSERT_TRUE(s.open(dir, &err)) << err;
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  JobSpec other = job;
  other.id = 3;
  other.window = 2;
  ASSERT_TRUE(s.save(job, 2, &err)) << err;
  ASSERT_TRUE(s.save(other, 5, &err)) << err;
  std::vector<SavedJob> jobs;
  ASSERT_TRUE(s.load(&jobs, &err)) << err;
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(format_job(jobs[0].spec), format_job(other));  // by id
  EXPECT_EQ(jobs[0].lcore, 5u);
  EXPECT_EQ(format_job(jobs[1].spec), format_job(job));
  EXPECT_EQ(jobs[1].lcore, 2u);
  EXPECT_EQ(read(s.path_of(7)).substr(0, read(s.path_of(7)).find('\n')),
            "inagg-state 2 job 7 spec " + job_digest(job) + " lcore 2");
  EXPECT_EQ(s.path_of(7), dir + "/job-7.state");
  ASSERT_TRUE(s.erase(3, &err)) << err;
  ASSERT_TRUE(s.erase(3, &err)) << "removing a job that has no file is no error: " << err;
  ASSERT_TRUE(s.load(&jobs, &err)) << err;
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].spec.id, 7u);
  EXPECT_FALSE(fs::exists(dir + "/job-3.state"));
}

TEST_F(JobStoreTest, OneApplianceAtATime) {
  JobStore a, b;
  std::string err;
  ASSERT_TRUE(a.open(dir, &err)) << err;
  EXPECT_FALSE(b.open(dir, &err));
  EXPECT_NE(err.find("another inagg uses the state directory"), std::string::npos) << err;
  // A check beside the running one neither locks nor changes anything.
  JobStore c;
  ASSERT_TRUE(c.open(dir, &err, JobStore::Mode::check)) << err;
}

TEST_F(JobStoreTest, ACheckOfADirectoryNotCreatedYetFindsNoJobs) {
  JobStore c;
  std::string err;
  ASSERT_TRUE(c.open(dir, &err, JobStore::Mode::check)) << err;
  std::vector<SavedJob> jobs{{job, 0}};
  ASSERT_TRUE(c.load(&jobs, &err)) << err;
  EXPECT_TRUE(jobs.empty());
  EXPECT_FALSE(fs::exists(dir)) << "a check created the state directory";
}

TEST_F(JobStoreTest, AWriteCutShortBeforeItsRenameIsCleared) {
  {
    JobStore s;
    std::string err;
    ASSERT_TRUE(s.open(dir, &err)) << err;
  }
  write(dir + "/.job-9.state.tmp", "inagg-state 1 job 9 spec 0");
  JobStore s;
  std::string err;
  ASSERT_TRUE(s.open(dir, &err)) << err;
  std::vector<SavedJob> jobs;
  ASSERT_TRUE(s.load(&jobs, &err)) << err;
  EXPECT_TRUE(jobs.empty());
  EXPECT_FALSE(fs::exists(dir + "/.job-9.state.tmp"));
}

TEST_F(JobStoreTest, AFileThatIsNotExactlyWhatInaggWroteRefusesTheDirectory) {
  const std::string path = saved();
  const std::string good = read(path);
  struct Case {
    const char* what;
    std::string text;
    const char* says;
  };
  std::string edited = good;
  edited.replace(edited.find("window = 4"), 10, "window = 5");
  std::string other_id = good;
  other_id.replace(0, other_id.find('\n'), "inagg-state 1 job 8 spec 00000000");
  std::string v3 = good;
  v3.replace(0, 13, "inagg-state 3");
  std::string v1_lcore = good;  // format 1 has no lcore
  v1_lcore.replace(0, 13, "inagg-state 1");
  std::string no_lcore = good;
  no_lcore.replace(no_lcore.find(" lcore 1"), 8, "");
  const Case cases[] = {
      {"cut short", good.substr(0, good.size() - 20), "its job does not read"},
      {"its last line lost", good.substr(0, good.rfind("conn")), "its job"},
      {"cut in its header", good.substr(0, 10), "does not begin with inagg's state header"},
      {"empty", "", "does not begin with inagg's state header"},
      {"edited", edited, "not the one its header names"},
      {"another id", other_id, "it holds job 8, its name says job 7"},
      {"another format", v3, "state format 3, this inagg reads 1 and 2"},
      {"format 1 with an lcore", v1_lcore, "its header is not format 1's"},
      {"format 2 without its lcore", no_lcore, "its header is not format 2's"},
      {"a job file", kJob, "does not begin with inagg's state header"},
      {"binary",
       std::string("\x7f"
                   "ELF\x02\x01\x01\0\0\0",
                   10),
       "does not begin with inagg's state header"},
  };
  for (const Case& c : cases) {
    write(path, c.text);
    const std::string err = refusal();
    EXPECT_NE(err.find("state file '" + path + "' is refused"), std::string::npos) << c.what << ": " << err;
    EXPECT_NE(err.find(c.says), std::string::npos) << c.what << ": " << err;
    EXPECT_NE(err.find("remove it"), std::string::npos) << c.what << ": " << err;
  }
  // A link to a file that reads well is no state file either.
  write(dir + "/elsewhere", good);
  fs::rename(dir + "/elsewhere", fs::path(dir).parent_path() / "elsewhere");
  fs::remove(path);
  fs::create_symlink(fs::path(dir).parent_path() / "elsewhere", path);
  const std::string link = refusal();
  EXPECT_NE(link.find("state file '" + path + "' is refused: it is not a regular file"), std::string::npos) << link;
  fs::remove(path);
  write(path, good);
  JobStore s;
  std::string err;
  ASSERT_TRUE(s.open(dir, &err)) << err;
  std::vector<SavedJob> jobs;
  EXPECT_TRUE(s.load(&jobs, &err)) << "the file as written no longer loads: " << err;
}

// A state file an earlier inagg wrote (format 1: a 32-bit FNV-1a digest, computed here by the
// textbook loop, and no lcore) still loads after an upgrade; one whose old digest does not match is
// refused.
TEST_F(JobStoreTest, AFormatOneFileOfAnEarlierInaggStillLoads) {
  const std::string path = saved();
  const std::string good = read(path);
  EXPECT_EQ(good.substr(0, good.find('\n') + 1), "inagg-state 2 job 7 spec " + job_digest(job) + " lcore 1\n");
  const std::string body = format_job(job);
  uint32_t h = 2166136261u;
  for (const unsigned char c : body) h = (h ^ c) * 16777619u;
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", h);
  write(path, "inagg-state 1 job 7 spec " + std::string(hex) + "\n" + body);
  {
    JobStore s;
    std::string err;
    ASSERT_TRUE(s.open(dir, &err)) << err;
    std::vector<SavedJob> jobs;
    ASSERT_TRUE(s.load(&jobs, &err)) << err;
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(format_job(jobs[0].spec), body);
    EXPECT_FALSE(jobs[0].lcore.has_value()) << "format 1 has no lcore: its job goes where there is room";
  }
  hex[0] = hex[0] == '0' ? '1' : '0';
  write(path, "inagg-state 1 job 7 spec " + std::string(hex) + "\n" + body);
  EXPECT_NE(refusal().find("not the one its header names"), std::string::npos);
}

// A file saved while the digest still covered the conn lines' MACs (the whole text's SHA-256) loads.
TEST_F(JobStoreTest, AFileWhoseDigestCoversItsMacsStillLoads) {
  JobSpec mac_job = job;
  mac_job.conns[0].mac = {2, 0, 0, 0, 0, 9};
  const std::string body = format_job(mac_job);
  ASSERT_NE(job_text_digest(mac_job), job_digest(mac_job));
  const std::string path = saved();
  write(path, "inagg-state 2 job 7 spec " + job_text_digest(mac_job) + " lcore 1\n" + body);
  JobStore s;
  std::string err;
  ASSERT_TRUE(s.open(dir, &err)) << err;
  std::vector<SavedJob> jobs;
  ASSERT_TRUE(s.load(&jobs, &err)) << err;
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(format_job(jobs[0].spec), body);
}

// A job set aside keeps its file, under another name that no load reads; saving the job again
// later (it was registered again) leaves the set-aside file alone.
TEST_F(JobStoreTest, AJobSetAsideIsKeptAndNoLongerLoaded) {
  JobStore s;
  std::string err;
  ASSERT_TRUE(s.open(dir, &err)) << err;
  JobSpec other = job;
  other.id = 3;
  ASSERT_TRUE(s.save(job, 1, &err)) << err;
  ASSERT_TRUE(s.save(other, 2, &err)) << err;
  const std::string text = read(s.path_of(7));
  ASSERT_TRUE(s.set_aside(7, &err)) << err;
  EXPECT_FALSE(fs::exists(s.path_of(7)));
  EXPECT_EQ(read(s.path_of(7) + ".refused"), text);
  std::vector<SavedJob> jobs;
  ASSERT_TRUE(s.load(&jobs, &err)) << err;
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].spec.id, 3u);
  EXPECT_FALSE(s.set_aside(7, &err)) << "a job with no file was set aside";
  EXPECT_NE(err.find("cannot set the state file aside"), std::string::npos) << err;
  ASSERT_TRUE(s.save(job, 1, &err)) << err;
  ASSERT_TRUE(s.load(&jobs, &err)) << err;
  EXPECT_EQ(jobs.size(), 2u);
  EXPECT_EQ(read(s.path_of(7) + ".refused"), text);
}

// A link planted at the temporary file's name is not followed: its target is left as it was, and
// the state file is written all the same.
TEST_F(JobStoreTest, ALinkAtTheTemporaryNameIsNotFollowed) {
  JobStore s;
  std::string err;
  ASSERT_TRUE(s.open(dir, &err)) << err;
  const std::string target = fs::path(dir).parent_path() / "victim";
  write(target, "precious\n");
  ::chmod(target.c_str(), 0644);
  fs::create_symlink(target, dir + "/.job-7.state.tmp");
  ASSERT_TRUE(s.save(job, 1, &err)) << err;
  EXPECT_EQ(read(target), "precious\n") << "the save wrote through the planted link";
  EXPECT_FALSE(fs::is_symlink(s.path_of(7)));
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir + "/.job-7.state.tmp")));
  std::vector<SavedJob> jobs;
  ASSERT_TRUE(s.load(&jobs, &err)) << err;
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(format_job(jobs[0].spec), format_job(job));
  // A link to where nothing is yet: O_CREAT alone would create the file there.
  const std::string absent = fs::path(dir).parent_path() / "absent";
  fs::create_symlink(absent, dir + "/.job-7.state.tmp");
  ASSERT_TRUE(s.save(job, 1, &err)) << err;
  EXPECT_FALSE(fs::exists(absent)) << "the save created the planted link's target";
}

// A state directory another user owns, or others may write in, is refused: whoever may write there
// could plant the jobs a restart registers.
TEST_F(JobStoreTest, ADirectoryOthersMayWriteInIsRefused) {
  fs::create_directories(dir);
  ::chmod(dir.c_str(), 0770);
  JobStore s;
  std::string err;
  EXPECT_FALSE(s.open(dir, &err));
  EXPECT_NE(err.find("with mode 770"), std::string::npos) << err;
  EXPECT_NE(err.find("chmod 700"), std::string::npos) << err;
  ::chmod(dir.c_str(), 0700);
  EXPECT_TRUE(s.open(dir, &err)) << err;
  if (::geteuid() == 0) {  // root can hand it to another user
    ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
    JobStore t;
    EXPECT_FALSE(t.open(dir, &err));
    EXPECT_NE(err.find("belongs to uid 65534"), std::string::npos) << err;
  }
}

TEST_F(JobStoreTest, AStrangersFileRefusesTheDirectory) {
  {
    JobStore s;
    std::string err;
    ASSERT_TRUE(s.open(dir, &err)) << err;
    ASSERT_TRUE(s.save(job, 1, &err)) << err;
  }
  for (const char* name :
       {"notes.txt", "job-07.state", "job-x.state", "job-99999999999.state", "job-x.state.refused", "x.refused"}) {
    write(dir + "/" + name, "hello\n");
    const std::string err = refusal();
    EXPECT_NE(err.find(std::string("holds '") + name + "', which is not an inagg state file"), std::string::npos)
        << err;
    fs::remove(dir + "/" + name);
  }
}

TEST_F(JobStoreTest, AStateDirectoryThatIsAFileIsRefused) {
  fs::create_directories(fs::path(dir).parent_path());
  write(dir, "x");
  JobStore s;
  std::string err;
  EXPECT_FALSE(s.open(dir, &err));
  EXPECT_NE(err.find("is not a directory"), std::string::npos) << err;
}

}  // namespace
}  // namespace inagg::control
