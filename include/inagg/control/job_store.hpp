// The appliance's state directory: the jobs registered at run time (through the control socket),
// one file each, so that an appliance that restarts knows them again before it forwards a packet.
//
//   DIR/lock             held (flock) while an appliance uses DIR: two never share one
//   DIR/job-<id>.state   one registered job:
//                          inagg-state 2 job <id> spec <job_digest, 64 hex> lcore <EAL lcore id>
//                          <format_job(spec), the canonical job file text>
//                        (format 1, an earlier inagg's, with a 32-bit FNV-1a digest and no lcore,
//                        is read too)
//   DIR/job-<id>.state.refused   a job that could not be registered again at a start, set aside
//                        (set_aside) so that the others start; kept for the operator, never loaded
//
// A file is written whole or not at all (a temporary file created afresh, never through a link,
// fsync, rename, fsync of DIR) when its job is added, and removed with its job. Loading is all or
// nothing: a file that is not exactly what save() writes (another header, a body that does not
// read back to itself, a digest or id that does not match, a file name of its own, a link) refuses
// the whole directory with the file's name and what is wrong; only leftover temporary files of a
// write cut short are removed. DIR must be ours and writable by nobody else (open() checks).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "inagg/control/job.hpp"

namespace inagg::control {

// A job of the state directory and the datapath lcore (EAL lcore id) that owned it when it was
// saved: a restart puts it there again. None for a file of format 1: it goes where there is room.
struct SavedJob {
  JobSpec spec;
  std::optional<unsigned> lcore;
};

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
  bool load(std::vector<SavedJob>* jobs, std::string* error) const;
  // Writes (or replaces) the job's file, with the lcore that owns it; durable when it returns true.
  bool save(const JobSpec& spec, unsigned lcore, std::string* error) const;
  // Renames the job's file to DIR/job-<id>.state.refused (replacing an older one there): a job
  // that cannot be registered again no longer stops a start, and nothing of it is lost.
  bool set_aside(uint32_t id, std::string* error) const;
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
