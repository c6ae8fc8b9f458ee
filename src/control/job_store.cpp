#include "inagg/control/job_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <optional>

#include "inagg/control/job_file.hpp"
#include "inagg/util/text.hpp"

namespace inagg::control {
namespace {

constexpr const char* kLockName = "lock";
constexpr const char* kTmpSuffix = ".tmp";
constexpr const char* kRefusedSuffix = ".refused";
constexpr unsigned kVersion = 2;  // 1: a 32-bit FNV-1a digest and no lcore (an earlier inagg's; read only)

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

std::string header_of(uint32_t id, const std::string& digest, unsigned lcore) {
  return "inagg-state " + std::to_string(kVersion) + " job " + std::to_string(id) + " spec " + digest + " lcore " +
         std::to_string(lcore) + "\n";
}

// The digest format 1 wrote (32-bit FNV-1a of the body): files an earlier inagg saved still load,
// and are written in format 2 when their job is saved again.
std::string fnv1a_hex(const std::string& body) {
  uint32_t h = 2166136261u;
  for (const char c : body) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08" PRIx32, h);
  return buf;
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The id in "job-<id>.state" (decimal, no sign, no leading zero), or -1 for any other name.
int64_t id_of_name(const std::string& name) {
  constexpr std::string_view pre = "job-", post = ".state";
  if (name.size() <= pre.size() + post.size() || name.compare(0, pre.size(), pre) != 0 ||
      name.compare(name.size() - post.size(), post.size(), post) != 0)
    return -1;
  const std::string digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
  if (digits.size() > 10 || (digits.size() > 1 && digits[0] == '0') ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  const uint64_t v = std::stoull(digits);
  return v > UINT32_MAX ? -1 : static_cast<int64_t>(v);
}

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// What save() wrote for `id`, read back exactly; on failure *why says what differs.
std::optional<SavedJob> read_state(const std::string& text, uint32_t id, std::string* why) {
  const size_t eol = text.find('\n');
  const std::string header = text.substr(0, eol == std::string::npos ? text.size() : eol + 1);
  unsigned version = 0, lcore = 0;
  uint32_t hid = 0;
  char digest[65] = "";
  int used = 0;
  if (std::sscanf(header.c_str(), "inagg-state %u ", &version) != 1) {
    *why =
        "it does not begin with inagg's state header (\"inagg-state 2 job ID spec DIGEST lcore LCORE\"): not a file "
        "inagg wrote";
    return std::nullopt;
  }
  const bool v2 = version == kVersion &&
                  std::sscanf(header.c_str(), "inagg-state %u job %" SCNu32 " spec %64[0-9a-f] lcore %u\n%n", &version,
                              &hid, digest, &lcore, &used) == 4 &&
                  static_cast<size_t>(used) == header.size();
  const bool v1 = version == 1 &&
                  std::sscanf(header.c_str(), "inagg-state %u job %" SCNu32 " spec %8[0-9a-f]\n%n", &version, &hid,
                              digest, &used) == 3 &&
                  static_cast<size_t>(used) == header.size();
  if ((version == 1 || version == kVersion) && !v1 && !v2) {
    *why = "its header is not format " + std::to_string(version) + "'s (" +
           (version == 1 ? "\"inagg-state 1 job ID spec DIGEST\", 8 hex digits"
                         : "\"inagg-state 2 job ID spec DIGEST lcore LCORE\", 64 hex digits") +
           "): not a file inagg wrote";
    return std::nullopt;
  }
  if (!v1 && !v2) {
    *why = "state format " + std::to_string(version) + ", this inagg reads 1 and " + std::to_string(kVersion);
    return std::nullopt;
  }
  if (hid != id) {
    *why = "it holds job " + std::to_string(hid) + ", its name says job " + std::to_string(id);
    return std::nullopt;
  }
  const std::string body = text.substr(header.size());
  std::string perr;
  std::optional<JobSpec> spec = parse_job(body, &perr);
  if (!spec) {
    *why = "its job does not read: " + perr;
    return std::nullopt;
  }
  const bool digest_ok =
      v1 ? fnv1a_hex(body) == digest : job_digest(*spec) == digest || job_text_digest(*spec) == digest;
  if (spec->id != id || format_job(*spec) != body || !digest_ok) {
    *why = "its job is not the one its header names (the file was changed or cut short)";
    return std::nullopt;
  }
  return SavedJob{std::move(*spec), v2 ? std::optional<unsigned>(lcore) : std::nullopt};
}

}  // namespace

JobStore::~JobStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

bool JobStore::open(const std::string& dir, std::string* error, Mode mode) {
  if (dir.empty()) {
    *error = "the state directory is empty: give a directory, or leave --state-dir out to keep no state";
    return false;
  }
  dir_ = dir;
  struct stat st {};
  if (mode == Mode::check) {
    missing_ = ::stat(dir.c_str(), &st) != 0 && errno == ENOENT;
    if (missing_ || S_ISDIR(st.st_mode)) return true;
    *error = "state directory '" + dir + "' is not a directory: give a directory for --state-dir";
    return false;
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = sys_error("cannot create the state directory", dir) + " (create it, or give another --state-dir)";
    return false;
  }
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = "state directory '" + dir + "' is not a directory: give a directory for --state-dir";
    return false;
  }
  // Whoever else may write in DIR could plant or swap the files a restart registers again.
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
    *error = "state directory '" + dir + "' belongs to uid " + std::to_string(st.st_uid) + " with mode " + mode +
             ", but must be inagg's own (uid " + std::to_string(::geteuid()) +
             ") and writable by nobody else: chown it to inagg's user and chmod 700 it, or give another --state-dir";
    return false;
  }
  const std::string lock = dir + "/" + kLockName;
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = sys_error("cannot open the state directory's lock", lock) + " (inagg must be able to write there)";
    return false;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    *error = "another inagg uses the state directory '" + dir + "' (it holds " + lock +
             "): give each appliance a --state-dir of its own";
    ::close(fd);
    return false;
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = fd;
  return true;
}

std::string JobStore::path_of(uint32_t id) const { return dir_ + "/job-" + std::to_string(id) + ".state"; }

bool JobStore::sync_dir(std::string* error) const {
  const int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    *error = sys_error("cannot sync the state directory", dir_);
    if (fd >= 0) ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

bool JobStore::load(std::vector<SavedJob>* jobs, std::string* error) const {
  if (missing_) {
    jobs->clear();
    return true;
  }
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) {
    *error = sys_error("cannot read the state directory", dir_);
    return false;
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  std::vector<SavedJob> found;
  const std::string refuse = "; remove it (its job must then be registered again) or give another --state-dir";
  const size_t tmp_len = std::strlen(kTmpSuffix), refused_len = std::strlen(kRefusedSuffix);
  for (const std::string& name : names) {
    // The appliance's bound ranks (rank_binding.hpp), written beside the jobs; not a job.
    if (name == "." || name == ".." || name == kLockName || name == "bindings" || name == ".bindings.tmp") continue;
    const std::string path = dir_ + "/" + name;
    // A write cut short before its rename: its job's add never answered ok. (Left alone by a check.)
    if (name.size() > tmp_len + 1 && name[0] == '.' && ends_with(name, kTmpSuffix) &&
        id_of_name(name.substr(1, name.size() - 1 - tmp_len)) >= 0) {
      if (lock_fd_ >= 0) ::unlink(path.c_str());
      continue;
    }
    // Set aside by an earlier start (set_aside): the operator's to look at, never registered.
    if (ends_with(name, kRefusedSuffix) && id_of_name(name.substr(0, name.size() - refused_len)) >= 0) continue;
    const int64_t id = id_of_name(name);
    if (id < 0) {
      *error =
          "state directory '" + dir_ + "' holds '" + name +
          "', which is not an inagg state file (only job-ID.state files, 'bindings' and 'lock' belong there): move it "
          "away or give another --state-dir";
      return false;
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      *error = "state file '" + path + "' is refused: it is not a regular file (inagg writes none but those)" + refuse;
      return false;
    }
    std::string text, why;
    if (!util::read_small_file(path, "state file", kMaxJobFileBytes + 128, "about 1 MiB", &text, &why)) {
      *error = why + refuse;
      return false;
    }
    std::optional<SavedJob> saved = read_state(text, static_cast<uint32_t>(id), &why);
    if (!saved) {
      *error = "state file '" + path + "' is refused: " + why + refuse;
      return false;
    }
    found.push_back(std::move(*saved));
  }
  std::sort(found.begin(), found.end(), [](const SavedJob& a, const SavedJob& b) { return a.spec.id < b.spec.id; });
  *jobs = std::move(found);
  return true;
}

bool JobStore::save(const JobSpec& spec, unsigned lcore, std::string* error) const {
  const std::string path = path_of(spec.id);
  const std::string tmp = dir_ + "/.job-" + std::to_string(spec.id) + ".state" + kTmpSuffix;
  const std::string text = header_of(spec.id, job_digest(spec), lcore) + format_job(spec);
  // Created afresh, never through what is already at its name: a link planted there is not
  // followed. Whatever is there (a write of ours cut short, a planted link) is removed first;
  // unlink() removes a link itself, never its target.
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), kFlags, 0600);
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0) fd = ::open(tmp.c_str(), kFlags, 0600);
  if (fd < 0) {
    *error = sys_error("cannot write the state file", tmp);
    return false;
  }
  const bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    errno = saved;
    *error = sys_error("cannot write the state file", tmp);
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = sys_error("cannot put the state file in place", path);
    ::unlink(tmp.c_str());
    return false;
  }
  return sync_dir(error);
}

bool JobStore::set_aside(uint32_t id, std::string* error) const {
  const std::string path = path_of(id), aside = path + kRefusedSuffix;
  if (::rename(path.c_str(), aside.c_str()) != 0) {
    *error = sys_error("cannot set the state file aside as '" + aside + "'", path);
    return false;
  }
  return sync_dir(error);
}

bool JobStore::erase(uint32_t id, std::string* error) const {
  const std::string path = path_of(id);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return true;
    *error = sys_error("cannot remove the state file", path);
    return false;
  }
  return sync_dir(error);
}

}  // namespace inagg::control
