// tessera serve's jobs: a request body read into a Job (runtime/job_request.h's fields plus the
// export fields, every bad field named), and the JobTable that holds the accepted ones: the queue
// with its limits (the whole queue, each client's share), their states and events, the ended ones
// kept for late readers (the newest kEndedJobsKept), and the journal --out/jobs.jsonl of the
// accepted jobs not yet ended, so that a restart says what it dropped.
//
// Threads: a JobTable is not locked by itself; its owner (the server) calls it under one mutex,
// the same one that guards the Job objects it hands out.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli/shape_cli.h"
#include "app/serve/answers.h"
#include "engine/runtime/session.h"

namespace tessera::serve {

enum class JobState { kQueued, kRunning, kDone, kFailed, kCancelled };
const char* state_name(JobState s);
bool terminal(JobState s);

struct Job {
  uint64_t id = 0;
  std::string client;
  nlohmann::json request;  // as accepted
  runtime::JobOptions options;
  // An image job ("kind": "image", engine/runtime/image_request.h): the image lane runs it and
  // its result is a PNG (candidate 0); null for a shape job.
  std::shared_ptr<runtime::ImageJobOptions> image;
  // A paint job ("kind": "paint", image_request.h parse_paint_request): the image lane paints its
  // mesh and the painted mesh (format glb or fbx, the export fields applied) is candidate 0. The
  // mesh is released when the job ends.
  std::shared_ptr<runtime::PaintJobOptions> paint;
  std::string format = "glb";
  cli::MeshExportCli exporting;  // preset, size or height, pivot, axes, unit, budget
  JobState state = JobState::kQueued;
  std::string error;
  std::vector<std::string> events;   // SSE data lines (JSON), in order
  std::map<int, std::string> files;  // candidate -> file under --out
  std::map<int, uint64_t> seeds;
  bool cancel_requested = false;  // asked while running: applied as soon as the Session has it

  // The Session lane the job runs on (image and paint jobs: the image lane).
  runtime::Lane lane() const {
    return image != nullptr || paint != nullptr ? runtime::Lane::kImage : runtime::Lane::kShape;
  }
};

// The file formats a job may ask for.
inline constexpr const char* kJobFormats[] = {"glb", "obj", "fbx", "stl", "3mf"};

// A POST /v1/jobs body as a Job not yet accepted (no id), or the refusal naming the bad field. A
// sampling job without a seed gets a random one, so that its files say how to make it again.
std::shared_ptr<Job> parse_job(const std::string& body, Refusal* refusal);

struct JobLimits {
  int max_queue = 64;  // jobs that may wait
  int per_client = 8;  // jobs one client address may have waiting
};

class JobTable {
 public:
  // Ended jobs kept for GET /v1/jobs and late streams; older ones are forgotten (their files stay).
  static constexpr size_t kEndedJobsKept = 256;

  JobTable(JobLimits limits, std::string journal_path)
      : limits_(limits), journal_path_(std::move(journal_path)) {}

  // Accepts `job` (an id, a "queued" event, a place in the queue and in the journal), or says
  // which limit refuses it (429, field "queue" or "client").
  std::optional<Refusal> admit(const std::shared_ptr<Job>& job);
  std::shared_ptr<Job> find(uint64_t id) const;
  bool has_queued() const { return !queue_.empty(); }
  // The next queued job, now running (a "started" event).
  std::shared_ptr<Job> start_next();
  // A queued job leaves the queue, cancelled; a running one is marked (true: the caller must stop
  // the Session's job). An ended job stays as it is.
  bool cancel(Job& job);
  // The job's end: its state, an event saying so, its previews' bytes dropped, the journal.
  void end(Job& job, JobState state, const std::string& error);

  nlohmann::json describe(const Job& job) const;  // GET /v1/jobs/ID
  nlohmann::json describe_all() const;            // GET /v1/jobs
  std::map<std::string, int> count_by_state() const;
  size_t queue_length() const { return queue_.size(); }

  // Prints the jobs an earlier start accepted and never ended (to stderr), then clears the journal.
  void report_dropped() const;

 private:
  void forget_old_jobs();
  void journal_ended(const Job& job) const;

  JobLimits limits_;
  std::string journal_path_;
  std::map<uint64_t, std::shared_ptr<Job>> jobs_;
  std::deque<uint64_t> queue_;
  uint64_t last_id_ = 0;
};

}  // namespace tessera::serve
