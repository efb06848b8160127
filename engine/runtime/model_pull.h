// Fetching and checking known models (engine/runtime/models.h) into the Hugging Face cache, the way
// the Hub's own tools write it, so either side finds the other's files (docs/models.md).
//
// pull_model: for each file of the model (and, for a shape model, of its text encoder) it asks
// the Hub where the file is (HEAD .../resolve/REVISION/PATH: the commit, the blob's hash, its
// size), checks the free disk space for what is missing, downloads each missing blob with libcurl
// (redirects to the CDN followed, HF_TOKEN sent to the Hub only, proxies from the environment),
// into blobs/<hash>.incomplete, resuming with Range after a dropped connection (a few retries in
// the same call) or from a previous interrupted call, verifies it (SHA-256 for LFS files, the Git
// blob id for the others) and only then renames it into place, links snapshots/<commit>/<path>
// to it and writes refs/<revision>. A lock file per blob, where the Hub's own client puts it
// (.locks/models--ORG--NAME/<hash>.lock), makes a second process wait for the first and reuse its
// blob. Nothing half-written is ever a model file.
//
// Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (gated repositories answer
// 401/403 without it: the error says so), HF_HUB_OFFLINE=1 (never touches the network: the cache
// is checked and what is missing is named).
//
// Threads: any thread; `cancel` is polled during transfers (a cancelled pull keeps its
// .incomplete files for the next one).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::runtime {

struct PullProgress {
  std::string model;            // the repository being fetched
  std::string file;             // the file within it
  int64_t done = 0;             // bytes of this file on disk so far
  int64_t total = 0;            // its size
  double bytes_per_second = 0;  // of this transfer
};

struct PullOptions {
  std::string revision = "main";                         // a branch, tag or commit
  std::function<void(const PullProgress&)> on_progress;  // from the pulling thread; may be empty
  const std::atomic<bool>* cancel = nullptr;
};

struct PullReport {
  std::vector<std::string> models;  // what was fetched or found complete (with the text encoder)
  int64_t downloaded_bytes = 0;     // transferred by this call
  int64_t reused_bytes = 0;         // already in the cache (blobs or partial downloads)
};

// Errors: an unknown name; HF_HUB_OFFLINE with files missing (named); the network (the URL and
// curl's reason); 401/403 (gated: "set HF_TOKEN"); 404 (repository, revision or file); not enough
// disk space (needed vs free); a blob whose hash does not match what the Hub stated (deleted); a
// cache folder that cannot be written. Cancellation: kCancelled.
Expected<PullReport> pull_model(const std::string& name, const PullOptions& options);

struct VerifyReport {
  std::vector<std::string> good;  // "ORG/NAME/path"
  std::vector<std::string> bad;   // "ORG/NAME/path: why"
};
// Recomputes every cached file's hash of `name` (and its text encoder) against the hash the Hub
// stated for it (the blob's name in the cache). No network. kNotFound when not cached.
Expected<VerifyReport> verify_model(const std::string& name, const std::string& revision = "main");

}  // namespace tessera::runtime
