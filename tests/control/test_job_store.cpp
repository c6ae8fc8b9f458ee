// The state directory: jobs saved and loaded back identically, removed with their job; a directory
// used by one appliance at a time; leftovers of a write cut short cleared; a file inagg did not write
// exactly (cut short, edited, another format, a stranger's) refuses the whole directory, naming it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

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
  // What load() says of the directory as it is now (it must refuse it).
  std::string refusal() {
    JobStore s;
    std::string err;
    EXPECT_TRUE(s.open(dir, &err)) << err;
    std::vector<JobSpec> jobs{job};
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
  ASSERT_TRUE(s.save(job, &err)) << err;
  ASSERT_TRUE(s.save(other, &err)) << err;
  std::vector<JobSpec> jobs;
  ASSERT_TRUE(s.load(&jobs, &err)) << err;
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(format_job(jobs[0]), format_job(other));  // by id
  EXPECT_EQ(format_job(jobs[1]), format_job(job));
  EXPECT_EQ(s.path_of(7), dir + "/job-7.state");
  ASSERT_TRUE(s.erase(3, &err)) << err;
  ASSERT_TRUE(s.erase(3, &err)) << "removing a job that has no file is no error: " << err;
  ASSERT_TRUE(s.load(&jobs, &err)) << err;
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id, 7u);
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
  std::vector<JobSpec> jobs{job};
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
  std::vector<JobSpec> jobs;
  ASSERT_TRUE(s.load(&jobs, &err)) << err;
  EXPECT_TRUE(jobs.empty());
  EXPECT_FALSE(fs::exists(dir + "/.job-9.state.tmp"));
}

TEST_F(JobStoreTest, AFileThatIsNotExactlyWhatInaggWroteRefusesTheDirectory) {
  std::string path;
  {
    JobStore s;
    std::string err;
    ASSERT_TRUE(s.open(dir, &err)) << err;
    ASSERT_TRUE(s.save(job, &err)) << err;
    path = s.path_of(7);
  }
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
  std::string v2 = good;
  v2.replace(0, 13, "inagg-state 2");
  const Case cases[] = {
      {"cut short", good.substr(0, good.size() - 20), "its job does not read"},
      {"its last line lost", good.substr(0, good.rfind("conn")), "its job"},
      {"cut in its header", good.substr(0, 10), "does not begin with inagg's state header"},
      {"empty", "", "does not begin with inagg's state header"},
      {"edited", edited, "not the one its header names"},
      {"another id", other_id, "it holds job 8, its name says job 7"},
      {"another format", v2, "state format 2"},
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
  write(path, good);
  JobStore s;
  std::string err;
  ASSERT_TRUE(s.open(dir, &err)) << err;
  std::vector<JobSpec> jobs;
  EXPECT_TRUE(s.load(&jobs, &err)) << "the file as written no longer loads: " << err;
}

TEST_F(JobStoreTest, AStrangersFileRefusesTheDirectory) {
  {
    JobStore s;
    std::string err;
    ASSERT_TRUE(s.open(dir, &err)) << err;
    ASSERT_TRUE(s.save(job, &err)) << err;
  }
  for (const char* name : {"notes.txt", "job-07.state", "job-x.state", "job-99999999999.state"}) {
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
