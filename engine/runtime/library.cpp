#include "engine/runtime/library.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <functional>
#include <set>

#include "core/mapped_file.h"
#include "engine/runtime/export_asset.h"
#include "engine/runtime/tokens_file.h"
#include "engine/runtime/environment_internal.h"

namespace tessera::runtime {

namespace fs = std::filesystem;

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// 16 random bytes as hex: a result's folder name, unique across processes.
std::string random_name() {
  std::random_device rd;
  std::string out;
  static const char* kHex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    const unsigned v = rd() & 0xFF;
    out += kHex[v >> 4];
    out += kHex[v & 15];
  }
  return out;
}

// fsync of a folder, so that a rename in it survives a power cut (best effort: some file systems
// refuse it for folders).
void sync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The process start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat); "" when
// there is no such process.
std::string process_start(int64_t pid) {
  const std::string stat = first_line("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return "";
  size_t pos = paren + 2;  // field 3 starts here
  for (int field = 3; field < 22 && pos != std::string::npos; ++field)
    pos = stat.find(' ', pos) + 1;
  if (pos == std::string::npos || pos == 0) return "";
  return stat.substr(pos, stat.find(' ', pos) - pos);
}

// Who runs a journal's job: this boot, this process id and its start time (ids are reused; a
// process id with another start time, or another boot, is another process).
std::string boot_id() {
  return first_line("/proc/sys/kernel/random/boot_id");
}
std::string this_owner() {
  return boot_id() + " " + std::to_string(::getpid()) + " " + process_start(::getpid());
}
bool owner_alive(const std::string& owner) {
  const size_t a = owner.find(' ');
  const size_t b = a == std::string::npos ? a : owner.find(' ', a + 1);
  if (b == std::string::npos) return false;
  if (owner.substr(0, a) != boot_id()) return false;
  int64_t pid = 0;
  try {
    pid = std::stoll(owner.substr(a + 1, b - a - 1));
  } catch (const std::exception&) {
    return false;
  }
  const std::string start = process_start(pid);
  return !start.empty() && start == owner.substr(b + 1);
}

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  void bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  std::string text(int col) {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t != nullptr ? reinterpret_cast<const char*>(t) : "";
  }
  int64_t integer(int col) { return sqlite3_column_int64(stmt_, col); }
  std::string error() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

constexpr const char* kColumns =
    "id, dir, created_ms, prompt, name, model, settings, group_id, candidate, seed, vertices, "
    "triangles, favourite, trashed_ms";

LibraryEntry read_entry(Statement& s, const std::string& dir) {
  LibraryEntry e;
  e.id = s.integer(0);
  e.folder = (fs::path(dir) / "items" / s.text(1)).string();
  e.created_ms = s.integer(2);
  e.prompt = s.text(3);
  e.name = s.text(4);
  e.model = s.text(5);
  e.settings = nlohmann::json::parse(s.text(6), nullptr, false);
  e.group = s.text(7);
  e.candidate = static_cast<int>(s.integer(8));
  e.seed = static_cast<uint64_t>(s.integer(9));
  e.vertices = s.integer(10);
  e.triangles = s.integer(11);
  e.favourite = s.integer(12) != 0;
  if (sqlite3_column_type(s.get(), 13) != SQLITE_NULL) e.trashed_ms = s.integer(13);
  return e;
}

}  // namespace

std::string default_library_dir() {
  return library_dir("");
}

std::string library_dir(const std::string& chosen) {
  if (std::string dir = env("TESSERA_LIBRARY"); !dir.empty()) return dir;
  if (!chosen.empty()) return chosen;
  return (fs::path(data_home()) / "tessera" / "library").string();
}

bool library_dir_from_environment() {
  return !env("TESSERA_LIBRARY").empty();
}

Expected<std::unique_ptr<Library>> Library::open(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "items", ec);
  if (ec) return io_error("library " + dir + ": cannot create the folder: " + ec.message());
  const std::string catalogue = (fs::path(dir) / "library.sqlite3").string();
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(catalogue.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    const std::string why = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return io_error("library catalogue " + catalogue + ": " + why);
  }
  std::unique_ptr<Library> library(new Library(dir, db));
  sqlite3_busy_timeout(db, 10000);
  Status st = library->exec("PRAGMA journal_mode=WAL");
  if (st.ok()) {
    st = library->exec(
        "CREATE TABLE IF NOT EXISTS results ("
        " id INTEGER PRIMARY KEY AUTOINCREMENT, dir TEXT NOT NULL UNIQUE,"
        " created_ms INTEGER NOT NULL, prompt TEXT NOT NULL, name TEXT NOT NULL DEFAULT '',"
        " model TEXT NOT NULL, settings TEXT NOT NULL, group_id TEXT NOT NULL,"
        " candidate INTEGER NOT NULL, seed INTEGER NOT NULL, vertices INTEGER NOT NULL,"
        " triangles INTEGER NOT NULL, favourite INTEGER NOT NULL DEFAULT 0,"
        " trashed_ms INTEGER);"
        "CREATE INDEX IF NOT EXISTS results_created ON results(created_ms);"
        "CREATE TABLE IF NOT EXISTS journal ("
        " id INTEGER PRIMARY KEY AUTOINCREMENT, started_ms INTEGER NOT NULL,"
        " prompt TEXT NOT NULL, settings TEXT NOT NULL, variations INTEGER NOT NULL,"
        " owner TEXT NOT NULL);"
        "PRAGMA user_version = 2;");
  }
  if (!st.ok()) return io_error("library catalogue " + catalogue + ": " + st.message());
  // Folders of results whose row never came (a crash between the two) are removed. Another
  // process may be between its rename and its insert (milliseconds): only folders untouched for a
  // minute count as left behind; a folder still being written has a ".tmp-<pid>" name.
  // Only with the whole list of rows in hand: a catalogue that cannot be read (busy, damaged)
  // must never make its results' folders look left behind.
  std::set<std::string> known;
  bool all_known = false;
  {
    Statement s(db, "SELECT dir FROM results");
    int rc = SQLITE_ERROR;
    while (s.ok() && (rc = sqlite3_step(s.get())) == SQLITE_ROW) known.insert(s.text(0));
    all_known = s.ok() && rc == SQLITE_DONE;
  }
  fs::directory_iterator it(fs::path(dir) / "items", ec);
  for (; all_known && !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path path = it->path();
    const std::string name = path.filename().string();
    std::error_code item_ec;
    if (const size_t tmp = name.find(".tmp-"); tmp != std::string::npos) {
      // Being written by process <pid>: left behind when that process is gone.
      if (!fs::exists("/proc/" + name.substr(tmp + 5), item_ec)) fs::remove_all(path, item_ec);
      continue;
    }
    if (known.count(name) != 0) continue;
    const auto age = fs::file_time_type::clock::now() - fs::last_write_time(path, item_ec);
    if (!item_ec && age > std::chrono::minutes(1)) fs::remove_all(path, item_ec);
  }
  return library;
}

Library::~Library() {
  sqlite3_close(db_);
}

Status Library::exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string why = error != nullptr ? error : sqlite3_errmsg(db_);
    sqlite3_free(error);
    return io_error(why);
  }
  return Status();
}

Expected<int64_t> Library::add(const NewResult& r) {
  if (r.mesh == nullptr || r.mesh->triangle_count() == 0) {
    return invalid_argument("library: a result needs a mesh with triangles");
  }
  const std::string name = random_name();
  const fs::path items = fs::path(dir_) / "items";
  const fs::path tmp = items / (name + ".tmp-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) return io_error("library " + dir_ + ": cannot write: " + ec.message());
  AssetExport request;
  request.settings = r.settings;
  auto written = export_asset(*r.mesh, (tmp / "mesh.glb").string(), request);
  // Each file atomically (temporary name, fsync, rename), then the folder itself.
  auto write = [&](const char* file, const std::string& bytes) {
    if (!written.ok()) return;
    if (Status st = write_file_atomic((tmp / file).string(), bytes.data(), bytes.size());
        !st.ok()) {
      written = io_error("library " + dir_ + ": cannot write " + file + ": " + st.message());
    }
  };
  if (written.ok()) {
    if (Status st = write_tokens_file((tmp / "tokens.txt").string(), r.tokens); !st.ok()) {
      written = io_error("library " + dir_ + ": cannot write tokens.txt: " + st.message());
    }
  }
  if (!r.timings.is_null()) write("timings.json", r.timings.dump() + "\n");
  if (!r.thumbnail_png.empty()) {
    write("thumbnail.png", std::string(r.thumbnail_png.begin(), r.thumbnail_png.end()));
  }
  if (written.ok()) sync_dir(tmp);
  if (written.ok()) {
    fs::rename(tmp, items / name, ec);
    if (ec)
      written = io_error("library " + dir_ + ": cannot move a result into place: " + ec.message());
    else
      sync_dir(items);
  }
  if (!written.ok()) {
    fs::remove_all(tmp, ec);
    return written.status();
  }
  Statement s(db_,
              "INSERT INTO results (dir, created_ms, prompt, model, settings, group_id, candidate,"
              " seed, vertices, triangles) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!s.ok()) return io_error("library catalogue: " + s.error());
  s.bind(1, name);
  s.bind(2, now_ms());
  s.bind(3, r.prompt);
  s.bind(4, r.model);
  s.bind(5, r.settings.dump());
  s.bind(6, r.group.empty() ? name : r.group);
  s.bind(7, static_cast<int64_t>(r.candidate));
  s.bind(8, static_cast<int64_t>(r.seed));
  s.bind(9, r.mesh->vertex_count());
  s.bind(10, r.mesh->triangle_count());
  if (sqlite3_step(s.get()) != SQLITE_DONE) {
    const std::string why = s.error();
    fs::remove_all(items / name, ec);
    return io_error("library catalogue: " + why);
  }
  return sqlite3_last_insert_rowid(db_);
}

Expected<std::vector<LibraryEntry>> Library::list(const LibraryQuery& q) {
  std::string sql = std::string("SELECT ") + kColumns + " FROM results WHERE " +
                    (q.trash ? "trashed_ms IS NOT NULL" : "trashed_ms IS NULL") +
                    " AND (?1 = '' OR instr(lower(prompt), lower(?1)) > 0 OR"
                    " instr(lower(name), lower(?1)) > 0) AND (?2 = '' OR model = ?2)"
                    " AND created_ms >= ?3 AND (?4 = 0 OR favourite = 1)"
                    " ORDER BY created_ms DESC, id DESC";
  if (q.limit > 0) sql += " LIMIT " + std::to_string(q.limit);
  Statement s(db_, sql.c_str());
  if (!s.ok()) return io_error("library catalogue: " + s.error());
  s.bind(1, q.text);
  s.bind(2, q.model);
  s.bind(3, q.since_ms);
  s.bind(4, static_cast<int64_t>(q.favourites ? 1 : 0));
  std::vector<LibraryEntry> out;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) out.push_back(read_entry(s, dir_));
  if (rc != SQLITE_DONE) return io_error("library catalogue: " + s.error());
  return out;
}

Expected<LibraryEntry> Library::get(int64_t id) {
  Statement s(db_, (std::string("SELECT ") + kColumns + " FROM results WHERE id = ?").c_str());
  if (!s.ok()) return io_error("library catalogue: " + s.error());
  s.bind(1, id);
  if (sqlite3_step(s.get()) != SQLITE_ROW) {
    return not_found("library " + dir_ + ": no result " + std::to_string(id));
  }
  return read_entry(s, dir_);
}

namespace {

Status update_one(sqlite3* db, const char* sql, int64_t id, const std::string& dir,
                  const std::function<void(Statement&)>& bind) {
  Statement s(db, sql);
  if (!s.ok()) return io_error("library catalogue: " + s.error());
  bind(s);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return io_error("library catalogue: " + s.error());
  if (sqlite3_changes(db) == 0) {
    return not_found("library " + dir + ": no result " + std::to_string(id));
  }
  return Status();
}

}  // namespace

Status Library::rename(int64_t id, const std::string& name) {
  return update_one(db_, "UPDATE results SET name = ? WHERE id = ?", id, dir_, [&](Statement& s) {
    s.bind(1, name);
    s.bind(2, id);
  });
}

Status Library::set_favourite(int64_t id, bool favourite) {
  return update_one(db_, "UPDATE results SET favourite = ? WHERE id = ?", id, dir_,
                    [&](Statement& s) {
                      s.bind(1, static_cast<int64_t>(favourite ? 1 : 0));
                      s.bind(2, id);
                    });
}

Status Library::write_beside(int64_t id, const char* file, const std::vector<uint8_t>& bytes) {
  TESSERA_ASSIGN_OR_RETURN(const LibraryEntry entry, get(id));
  const std::string path = entry.folder + "/" + file;
  if (Status st = write_file_atomic(path, bytes.data(), bytes.size()); !st.ok()) {
    return io_error("library " + dir_ + ": cannot write " + path + ": " + st.message());
  }
  return Status();
}

Status Library::set_thumbnail(int64_t id, const std::vector<uint8_t>& png) {
  return write_beside(id, "thumbnail.png", png);
}

Status Library::set_concept(int64_t id, const std::vector<uint8_t>& png) {
  return write_beside(id, "concept.png", png);
}

Status Library::set_textured(int64_t id, const mesh::Mesh& textured) {
  TESSERA_ASSIGN_OR_RETURN(const LibraryEntry entry, get(id));
  AssetExport request;
  request.settings = entry.settings;
  auto written = export_asset(textured, entry.textured_file(), request);
  if (!written.ok()) {
    return io_error("library " + dir_ + ": cannot write " + entry.textured_file() + ": " +
                    written.status().message());
  }
  return Status();
}

Status Library::set_trashed(int64_t id, bool trashed) {
  return update_one(db_,
                    trashed ? "UPDATE results SET trashed_ms = ? WHERE id = ?2"
                            : "UPDATE results SET trashed_ms = NULL WHERE id = ?2",
                    id, dir_, [&](Statement& s) {
                      if (trashed) s.bind(1, now_ms());
                      s.bind(2, id);
                    });
}

Status Library::trash(int64_t id) {
  return set_trashed(id, true);
}

Status Library::restore(int64_t id) {
  return set_trashed(id, false);
}

Expected<int64_t> Library::empty_trash() {
  // The rows listed and deleted in one transaction (a result another process restores meanwhile
  // keeps its row and its folder), then the deleted rows' folders.
  TESSERA_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  auto trashed = list({"", "", true, 0});
  Status st = trashed.status();
  for (size_t i = 0; st.ok() && i < trashed->size(); ++i) {
    Statement d(db_, "DELETE FROM results WHERE id = ?");
    d.bind(1, (*trashed)[i].id);
    if (!d.ok() || sqlite3_step(d.get()) != SQLITE_DONE)
      st = io_error("library catalogue: " + d.error());
  }
  if (st.ok()) st = exec("COMMIT");
  if (!st.ok()) {
    (void)exec("ROLLBACK");
    return st;
  }
  std::error_code ec;
  for (const LibraryEntry& e : *trashed) fs::remove_all(e.folder, ec);
  return static_cast<int64_t>(trashed->size());
}

Status Library::check() {
  {
    Statement s(db_, "PRAGMA integrity_check");
    if (!s.ok() || sqlite3_step(s.get()) != SQLITE_ROW) {
      return corrupt_data("library catalogue: " + s.error());
    }
    if (s.text(0) != "ok") return corrupt_data("library catalogue: " + s.text(0));
  }
  for (bool trash : {false, true}) {
    TESSERA_ASSIGN_OR_RETURN(const std::vector<LibraryEntry> entries, list({"", "", trash, 0}));
    std::error_code ec;
    for (const LibraryEntry& e : entries) {
      for (const std::string& f : {e.mesh_file(), e.tokens_file()}) {
        if (!fs::is_regular_file(f, ec)) {
          return corrupt_data("library: result " + std::to_string(e.id) + " lacks " + f);
        }
      }
    }
  }
  return Status();
}

Expected<int64_t> Library::data_version() {
  Statement s(db_, "PRAGMA data_version");
  if (!s.ok() || sqlite3_step(s.get()) != SQLITE_ROW) {
    return io_error("library catalogue: " + s.error());
  }
  return s.integer(0);
}

Expected<int64_t> Library::begin_job(const std::string& prompt, const nlohmann::json& settings,
                                     int variations) {
  Statement s(db_,
              "INSERT INTO journal (started_ms, prompt, settings, variations, owner)"
              " VALUES (?, ?, ?, ?, ?)");
  if (!s.ok()) return io_error("library catalogue: " + s.error());
  s.bind(1, now_ms());
  s.bind(2, prompt);
  s.bind(3, settings.dump());
  s.bind(4, static_cast<int64_t>(variations));
  s.bind(5, this_owner());
  if (sqlite3_step(s.get()) != SQLITE_DONE) return io_error("library catalogue: " + s.error());
  return sqlite3_last_insert_rowid(db_);
}

Status Library::end_job(int64_t id) {
  Statement s(db_, "DELETE FROM journal WHERE id = ?");
  if (!s.ok()) return io_error("library catalogue: " + s.error());
  s.bind(1, id);
  if (sqlite3_step(s.get()) != SQLITE_DONE) return io_error("library catalogue: " + s.error());
  return Status();
}

Expected<std::vector<JournalJob>> Library::journal() {
  return read_journal(false);
}

Expected<std::vector<JournalJob>> Library::take_interrupted() {
  // One transaction, so that two front ends starting at once cannot both take a job.
  TESSERA_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  auto taken = take_interrupted_locked();
  if (taken.ok()) {
    if (Status committed = exec("COMMIT"); !committed.ok()) {
      (void)exec("ROLLBACK");
      return committed;
    }
    return taken;
  }
  (void)exec("ROLLBACK");
  return taken;
}

Expected<std::vector<JournalJob>> Library::take_interrupted_locked() {
  TESSERA_ASSIGN_OR_RETURN(std::vector<JournalJob> gone, read_journal(true));
  for (const JournalJob& job : gone) TESSERA_RETURN_IF_ERROR(end_job(job.id));
  return gone;
}

Expected<std::vector<JournalJob>> Library::read_journal(bool gone_only) {
  std::vector<JournalJob> gone;
  {
    Statement s(db_,
                "SELECT id, started_ms, prompt, settings, variations, owner FROM journal"
                " ORDER BY id");
    if (!s.ok()) return io_error("library catalogue: " + s.error());
    int rc = SQLITE_ROW;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      if (gone_only && owner_alive(s.text(5))) continue;
      JournalJob job;
      job.id = s.integer(0);
      job.started_ms = s.integer(1);
      job.prompt = s.text(2);
      job.settings = nlohmann::json::parse(s.text(3), nullptr, false);
      job.variations = static_cast<int>(s.integer(4));
      gone.push_back(std::move(job));
    }
    if (rc != SQLITE_DONE) return io_error("library catalogue: " + s.error());
  }
  return gone;
}

}  // namespace tessera::runtime
