// The appliance's state directory: the jobs registered at run time (through the control socket),
// one file each, so that an appliance that restarts knows them again before it forwards a packet.
//
//   DIR/lock             held (flock) while an appliance uses DIR: two never share one
//   DIR/job-<id>.state   one registered job:
//                          inagg-state 1 job <id> spec <job_digest, 8 hex>
//                          <format_job(spec), the canonical job file text>
//
// A file is written whole or not at all (a temporary file, fsync, rename, fsync of DIR) when its
// job is added, and removed with its job. Loading is all or nothing: a file that is not exactly
// what save() writes (another header, a body that does not read back to itself, a digest or id
// that does not match, a file name of its own) refuses the whole directory with the file's name
// and what is wrong; only leftover temporary files of a write cut short are removed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inagg/control/job.hpp"

namespace inagg::control {

class JobStore {
 public:
  JobStore() = default;
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Creates DIR (mode 0700) when it does not exist and takes its lock. On failure sets *error to a
  // sentence naming DIR and what to change. Mode::check (--check-config, beside a running
  // appliance): neither creates nor locks; a DIR that does not exist yet holds no jobs.
  enum class Mode { use, check };
  bool open(const std::string& dir, std::string* error, Mode mode = Mode::use);
  const std::string& dir() const { return dir_; }

  // Every job the directory holds, by id. False (and *jobs untouched) when any file is refused.
  bool load(std::vector<JobSpec>* jobs, std::string* error) const;
  // Writes (or replaces) the job's file; durable when it returns true.
  bool save(const JobSpec& spec, std::string* error) const;
  // Removes the job's file (none is no error); durable when it returns true.
  bool erase(uint32_t id, std::string* error) const;

  std::string path_of(uint32_t id) const;  // DIR/job-<id>.state

 private:
  bool sync_dir(std::string* error) const;

  std::string dir_;
  int lock_fd_ = -1;
  bool missing_ = false;  // Mode::check of a DIR not created yet
};

}  // namespace inagg::control
