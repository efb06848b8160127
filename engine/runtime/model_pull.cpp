#include "engine/runtime/model_pull.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include "core/sha256.h"
#include "engine/runtime/models.h"
#include "engine/runtime/environment_internal.h"

namespace tessera::runtime {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// As the Hub's own tools read it: 1, ON, YES or TRUE (any case).
bool offline() {
  const std::string v = lower(env("HF_HUB_OFFLINE"));
  return v == "1" || v == "on" || v == "yes" || v == "true";
}

std::string endpoint() {
  std::string e = env("HF_ENDPOINT");
  if (e.empty()) e = "https://huggingface.co";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

void init_curl() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct ListDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using Curl = std::unique_ptr<CURL, CurlDeleter>;

// What the Hub says of one file.
struct Remote {
  std::string commit;
  std::string hash;  // the blob's name: SHA-256 (LFS) or Git blob SHA-1
  int64_t size = -1;
  bool lfs = false;
};

size_t collect_header(char* data, size_t size, size_t n, void* user) {
  auto* headers = static_cast<std::vector<std::pair<std::string, std::string>>*>(user);
  std::string line(data, size * n);
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.erase(0, 1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.pop_back();
    headers->emplace_back(lower(line.substr(0, colon)), value);
  }
  return size * n;
}

std::string unquote(std::string v) {
  if (v.rfind("W/", 0) == 0) v.erase(0, 2);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

// HF_TOKEN, else the token `huggingface-cli login` saved (HF_TOKEN_PATH, else HF_HOME/token, else
// XDG_CACHE_HOME or ~/.cache /huggingface/token).
std::string hub_token() {
  if (std::string token = env("HF_TOKEN"); !token.empty()) return token;
  std::string path = env("HF_TOKEN_PATH");
  if (path.empty()) {
    std::string home = env("HF_HOME");
    if (home.empty()) home = (fs::path(cache_home()) / "huggingface").string();
    path = (fs::path(home) / "token").string();
  }
  std::ifstream in(path);
  std::string token;
  in >> token;
  return token;
}

curl_slist* auth_headers() {
  curl_slist* list = nullptr;
  const std::string token = hub_token();
  if (!token.empty()) list = curl_slist_append(list, ("Authorization: Bearer " + token).c_str());
  list = curl_slist_append(list, "User-Agent: tessera/" TESSERA_VERSION);
  return list;
}

// One HEAD request, redirects not followed: its status and headers (lower-case names).
struct Head {
  long code = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string header(const std::string& key) const {
    for (const auto& [k, v] : headers) {
      if (k == key) return v;
    }
    return std::string();
  }
};

Expected<Head> head(const std::string& url) {
  Curl curl(curl_easy_init());
  if (!curl) return internal_error("cannot start a transfer (libcurl)");
  std::unique_ptr<curl_slist, ListDeleter> list(auth_headers());
  Head h;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_NOBODY, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, list.get());
  curl_easy_setopt(curl.get(), CURLOPT_HEADERFUNCTION, collect_header);
  curl_easy_setopt(curl.get(), CURLOPT_HEADERDATA, &h.headers);
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT, 20L);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT, 60L);
  const CURLcode rc = curl_easy_perform(curl.get());
  if (rc != CURLE_OK) {
    return io_error("cannot reach " + url + ": " + curl_easy_strerror(rc) +
                    " (offline? HF_HUB_OFFLINE=1 uses the cache only)");
  }
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &h.code);
  return h;
}

// Where `path` of `name` at `revision` is. As the Hub's own client does: redirects to the Hub
// itself (a relative Location: a renamed repository, the resolve cache of small files) are
// followed and the file's headers read from the final answer; a redirect elsewhere (an LFS file's
// CDN) carries them itself (X-Linked-Etag, X-Linked-Size).
Expected<Remote> ask_hub(const std::string& name, const std::string& revision,
                         const std::string& path, bool required) {
  const std::string url = endpoint() + "/" + name + "/resolve/" + revision + "/" + path;
  std::string at = url;
  Head h;
  Remote r;
  for (int hop = 0;; ++hop) {
    TESSERA_ASSIGN_OR_RETURN(h, head(at));
    if (const std::string commit = h.header("x-repo-commit"); !commit.empty()) r.commit = commit;
    const std::string location = h.header("location");
    const bool redirect = h.code == 301 || h.code == 302 || h.code == 307 || h.code == 308;
    if (!redirect || !h.header("x-linked-etag").empty() || location.empty() ||
        location.front() != '/' || hop == 5) {
      break;
    }
    at = endpoint() + location;
  }
  const std::string error_code = h.header("x-error-code");
  if ((h.code == 401 || h.code == 403) && error_code != "RepoNotFound") {
    return io_error(
        name + " is gated or private (" + url + " answered " + std::to_string(h.code) + "): " +
        (hub_token().empty()
             ? "accept its terms on the Hub, then set HF_TOKEN to an access token of yours (or "
               "log in with huggingface-cli login)"
             : "the token in use (HF_TOKEN or huggingface-cli login's) is not allowed to read it; "
               "accept its terms on the Hub with that account"));
  }
  if (h.code == 404 || h.code == 401) {
    if (!required && error_code == "EntryNotFound") return not_found("");
    const std::string what = error_code == "RepoNotFound"       ? "no repository " + name
                             : error_code == "RevisionNotFound" ? "no revision " + revision
                                                                : "no file " + path;
    return not_found(url + ": " + what + " on " + endpoint());
  }
  if (h.code != 200 && h.code != 301 && h.code != 302 && h.code != 307 && h.code != 308) {
    return io_error(url + " answered HTTP " + std::to_string(h.code));
  }
  if (const std::string linked = h.header("x-linked-etag"); !linked.empty()) {
    r.hash = unquote(linked);
    r.lfs = true;
    const std::string size = h.header("x-linked-size");
    r.size = size.empty() ? -1 : std::atoll(size.c_str());
  } else if (h.code == 200) {
    r.hash = unquote(h.header("etag"));
    const std::string size = h.header("content-length");
    r.size = size.empty() ? -1 : std::atoll(size.c_str());
  }
  if (r.commit.empty() || r.hash.empty() || r.size < 0) {
    return io_error(url + " did not say which commit, hash or size the file has (is " + endpoint() +
                    " a Hugging Face Hub?)");
  }
  return r;
}

struct Transfer {
  std::FILE* out = nullptr;
  int64_t offset = 0;  // bytes on disk before this attempt
  int64_t written = 0;
  bool checked_status = false;
  bool overflow = false;  // the server sent more than the stated size
  CURL* curl = nullptr;
  const PullOptions* options = nullptr;
  PullProgress progress;
  std::chrono::steady_clock::time_point start, last_report;
};

size_t write_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  if (!t->checked_status) {
    t->checked_status = true;
    long code = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &code);
    if (code == 200 && t->offset > 0) {
      // The server ignored the Range: start the file again.
      if (std::fflush(t->out) != 0 || ftruncate(fileno(t->out), 0) != 0) return 0;
      std::rewind(t->out);
      t->offset = 0;
    }
  }
  const size_t bytes = size * n;
  // More than the Hub stated: stop at once rather than fill the disk.
  if (t->offset + t->written + static_cast<int64_t>(bytes) > t->progress.total) {
    t->overflow = true;
    return 0;
  }
  if (std::fwrite(data, 1, bytes, t->out) != bytes) return 0;
  t->written += static_cast<int64_t>(bytes);
  return bytes;
}

int on_transfer(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->options->cancel != nullptr && t->options->cancel->load()) return 1;
  const auto now = std::chrono::steady_clock::now();
  if (t->options->on_progress && now - t->last_report > std::chrono::milliseconds(200)) {
    t->last_report = now;
    const double seconds = std::chrono::duration<double>(now - t->start).count();
    t->progress.done = t->offset + t->written;
    t->progress.bytes_per_second = seconds > 0 ? static_cast<double>(t->written) / seconds : 0;
    t->options->on_progress(t->progress);
  }
  return 0;
}

// Downloads `url` into `part`, appending to what is there; a few attempts, each resuming.
Status download(const std::string& url, const fs::path& part, int64_t size,
                const PullOptions& options, PullProgress progress, int64_t* transferred) {
  constexpr int kAttempts = 5;
  std::string last_error;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::error_code ec;
    int64_t have = fs::exists(part, ec) ? static_cast<int64_t>(fs::file_size(part, ec)) : 0;
    if (have >= size) return Status();
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(part.c_str(), "ab"),
                                                        &std::fclose);
    if (!out) return io_error("cannot write " + part.string() + ": " + std::strerror(errno));
    Curl curl(curl_easy_init());
    if (!curl) return internal_error("cannot start a transfer (libcurl)");
    std::unique_ptr<curl_slist, ListDeleter> list(auth_headers());
    Transfer t;
    t.out = out.get();
    t.offset = have;
    t.curl = curl.get();
    t.options = &options;
    t.progress = progress;
    t.progress.total = size;
    t.start = t.last_report = std::chrono::steady_clock::now();
    curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, list.get());
    curl_easy_setopt(curl.get(), CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(have));
    curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, write_body);
    curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(curl.get(), CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl.get(), CURLOPT_XFERINFOFUNCTION, on_transfer);
    curl_easy_setopt(curl.get(), CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT, 20L);
    // A transfer that stalls (under 1 kB/s for 30 s) is dropped and resumed.
    curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(curl.get(), CURLOPT_FAILONERROR, 1L);
    const CURLcode rc = curl_easy_perform(curl.get());
    std::fflush(out.get());
    *transferred += t.written;
    long code = 0;
    curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &code);
    // A server that cannot resume (no ranges), or a part larger than the file: start it again.
    if (rc == CURLE_RANGE_ERROR || code == 416) {
      out.reset();
      fs::remove(part, ec);
      last_error = rc == CURLE_RANGE_ERROR ? "the server does not resume" : "HTTP 416";
      continue;
    }
    if (rc == CURLE_OK) {
      have = static_cast<int64_t>(fs::file_size(part, ec));
      if (have == size) return Status();
      if (have > size) {
        fs::remove(part, ec);
        return io_error(url + " sent " + std::to_string(have) + " bytes, more than the " +
                        std::to_string(size) + " it stated; the partial file was deleted");
      }
      last_error = "the transfer ended early";
      continue;
    }
    if (t.overflow) {
      out.reset();
      fs::remove(part, ec);
      return io_error(url + " sent more than the " + std::to_string(size) +
                      " bytes it stated; the partial file was deleted");
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
      return cancelled("download cancelled; run it again to resume");
    }
    if (rc == CURLE_HTTP_RETURNED_ERROR) {
      return io_error(url + " answered HTTP " + std::to_string(code));
    }
    last_error = curl_easy_strerror(rc);
  }
  return io_error("could not download " + url + " after " + std::to_string(kAttempts) +
                  " attempts (" + last_error + "); run the pull again to resume");
}

// Holds an exclusive lock on `path` (created, with its folder) for the object's life: the path
// the Hub's own client locks, <cache>/.locks/models--ORG--NAME/<hash>.lock, so a pull and a
// `huggingface-cli download` of the same blob exclude each other too. Waiting polls `cancel`.
class FileLock {
 public:
  FileLock(const fs::path& path, const std::atomic<bool>* cancel) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd_ < 0) return;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (cancel != nullptr && cancel->load()) {
        cancelled_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    held_ = true;
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return held_; }
  bool cancelled() const { return cancelled_; }

 private:
  int fd_ = -1;
  bool held_ = false, cancelled_ = false;
};

Expected<std::string> blob_hash_of(const fs::path& file, bool lfs) {
  return lfs ? sha256_file(file.string()) : git_blob_sha1_file(file.string());
}

// Links snapshots/<commit>/<path> to blobs/<hash> (relative, as the Hub's tools do).
Status link_snapshot(const fs::path& repo, const std::string& commit, const std::string& path,
                     const std::string& hash) {
  const fs::path link = repo / "snapshots" / commit / path;
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  if (ec) return io_error("cannot create " + link.parent_path().string() + ": " + ec.message());
  fs::path target = "..";
  for (size_t depth = static_cast<size_t>(std::count(path.begin(), path.end(), '/')); depth > 0;
       --depth) {
    target /= "..";
  }
  target = target / ".." / "blobs" / hash;
  const fs::path tmp = link.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (!ec) fs::rename(tmp, link, ec);
  if (ec) return io_error("cannot link " + link.string() + ": " + ec.message());
  return Status();
}

Status write_ref(const fs::path& repo, const std::string& revision, const std::string& commit) {
  if (revision == commit) return Status();
  std::error_code ec;
  fs::create_directories(repo / "refs", ec);
  const fs::path ref = repo / "refs" / revision;
  const fs::path tmp = ref.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << commit;
    if (!out) return io_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, ref, ec);
  if (ec) return io_error("cannot write " + ref.string() + ": " + ec.message());
  return Status();
}

int64_t free_bytes(fs::path dir) {
  std::error_code ec;
  while (!dir.empty() && !fs::exists(dir, ec)) dir = dir.parent_path();
  struct statvfs s {};
  if (dir.empty() || ::statvfs(dir.c_str(), &s) != 0) return -1;
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

Status pull_one(const KnownModel& model, const PullOptions& options, PullReport* report) {
  TESSERA_ASSIGN_OR_RETURN(const CachedModel cached,
                           find_cached_model(model.name, options.revision));
  if (offline()) {
    if (cached.complete()) {
      report->models.push_back(model.name);
      return Status();
    }
    std::string list;
    for (const std::string& f : cached.missing) {
      if (!list.empty()) list += ", ";
      list += f;
    }
    return io_error("HF_HUB_OFFLINE is set and " + model.name + " lacks " +
                    (list.empty() ? std::string("a snapshot") : list) + " in " + cached.repo_dir);
  }
  const fs::path repo(cached.repo_dir);
  // Where every file is, first (so a missing file or a gated repository fails before any byte).
  std::vector<std::pair<const ModelFile*, Remote>> remote;
  // The first answer fixes the commit: the rest are asked at it, so a branch that moves
  // meanwhile cannot mix two commits in one snapshot.
  std::string at = options.revision;
  for (const ModelFile& f : model.files) {
    if (options.cancel != nullptr && options.cancel->load()) {
      return cancelled("download cancelled; run it again to resume");
    }
    auto r = ask_hub(model.name, at, f.path, f.required);
    if (!r.ok()) {
      if (!f.required && r.status().code() == ErrorCode::kNotFound) continue;
      return r.status();
    }
    at = r->commit;
    remote.emplace_back(&f, std::move(r).value());
  }
  int64_t needed = 0;
  std::error_code ec;
  for (const auto& [file, r] : remote) {
    const fs::path blob = repo / "blobs" / r.hash;
    if (fs::exists(blob, ec)) continue;
    const fs::path part = blob.string() + ".incomplete";
    const int64_t have = fs::exists(part, ec) ? static_cast<int64_t>(fs::file_size(part, ec)) : 0;
    needed += std::max<int64_t>(0, r.size - have);
  }
  fs::create_directories(repo / "blobs", ec);
  if (ec) return io_error("cannot create " + (repo / "blobs").string() + ": " + ec.message());
  const int64_t free = free_bytes(repo);
  if (free >= 0 && needed > free) {
    return io_error("not enough disk space for " + model.name + ": " +
                    std::to_string(needed / 1000000) + " MB to download, " +
                    std::to_string(free / 1000000) + " MB free in " + repo.string());
  }
  for (const auto& [file, r] : remote) {
    const fs::path blob = repo / "blobs" / r.hash;
    if (options.cancel != nullptr && options.cancel->load()) {
      return cancelled("download cancelled; run it again to resume");
    }
    FileLock lock(fs::path(hf_hub_cache_dir()) / ".locks" / repo.filename() / (r.hash + ".lock"),
                  options.cancel);
    if (lock.cancelled()) return cancelled("download cancelled while another pull held the file");
    if (!lock.held()) return io_error("cannot write in " + hf_hub_cache_dir());
    if (fs::exists(blob, ec)) {
      report->reused_bytes += r.size;
    } else {
      const fs::path part = blob.string() + ".incomplete";
      if (fs::exists(part, ec))
        report->reused_bytes += static_cast<int64_t>(fs::file_size(part, ec));
      PullProgress progress;
      progress.model = model.name;
      progress.file = file->path;
      const std::string url =
          endpoint() + "/" + model.name + "/resolve/" + r.commit + "/" + file->path;
      TESSERA_RETURN_IF_ERROR(
          download(url, part, r.size, options, progress, &report->downloaded_bytes));
      TESSERA_ASSIGN_OR_RETURN(const std::string hash, blob_hash_of(part, r.lfs));
      if (hash != r.hash) {
        fs::remove(part, ec);
        return corrupt_data(model.name + "/" + file->path + ": the downloaded file's hash " + hash +
                            " is not the " + r.hash +
                            " the Hub stated; it was deleted (run the "
                            "pull again)");
      }
      fs::rename(part, blob, ec);
      if (ec) return io_error("cannot move " + part.string() + " into place: " + ec.message());
      if (options.on_progress) {
        progress.done = progress.total = r.size;
        options.on_progress(progress);
      }
    }
    TESSERA_RETURN_IF_ERROR(link_snapshot(repo, r.commit, file->path, r.hash));
  }
  if (!remote.empty()) {
    TESSERA_RETURN_IF_ERROR(write_ref(repo, options.revision, remote.front().second.commit));
  }
  report->models.push_back(model.name);
  return Status();
}

}  // namespace

Expected<PullReport> pull_model(const std::string& name, const PullOptions& options) {
  const KnownModel* model = find_known_model(name);
  if (model == nullptr) {
    std::string names;
    for (const KnownModel& m : known_models()) {
      if (!names.empty()) names += ", ";
      names += m.name;
    }
    return not_found(name + " is not a model Tessera knows (" + names + ")");
  }
  init_curl();
  PullReport report;
  TESSERA_RETURN_IF_ERROR(pull_one(*model, options, &report));
  if (!model->text_encoder.empty()) {
    PullOptions text = options;
    text.revision = "main";  // the revision names the shape model's commit, not CLIP's
    TESSERA_RETURN_IF_ERROR(pull_one(*find_known_model(model->text_encoder), text, &report));
  }
  return report;
}

Expected<VerifyReport> verify_model(const std::string& name, const std::string& revision) {
  const KnownModel* model = find_known_model(name);
  if (model == nullptr) return not_found(name + " is not a model Tessera knows");
  VerifyReport report;
  std::vector<std::pair<const KnownModel*, std::string>> todo = {{model, revision}};
  if (!model->text_encoder.empty())
    todo.emplace_back(find_known_model(model->text_encoder), "main");
  for (const auto& [m, rev] : todo) {
    TESSERA_ASSIGN_OR_RETURN(const CachedModel cached, find_cached_model(m->name, rev));
    if (cached.commit.empty()) {
      return not_found(m->name + " is not in the Hugging Face cache (" + cached.repo_dir + ")");
    }
    for (const std::string& missing : cached.missing) {
      report.bad.push_back(m->name + "/" + missing + ": missing");
    }
    for (const std::string& path : cached.present) {
      const fs::path link = fs::path(cached.snapshot_dir) / path;
      std::error_code ec;
      const fs::path blob = fs::canonical(link, ec);
      const std::string stated = blob.filename().string();
      const bool lfs = stated.size() == 64;
      auto hash = blob_hash_of(blob, lfs);
      if (!hash.ok()) {
        report.bad.push_back(m->name + "/" + path + ": " + hash.status().message());
      } else if (*hash != stated) {
        report.bad.push_back(m->name + "/" + path + ": hash " + *hash + ", the Hub stated " +
                             stated);
      } else {
        report.good.push_back(m->name + "/" + path);
      }
    }
  }
  return report;
}

}  // namespace tessera::runtime
