// The library: every result kept as it is made, with what made it (docs/library.md).
//
// A folder (default_library_dir()) holding a SQLite catalogue, library.sqlite3 (WAL: readers never
// block the writer, and several processes, studios and CLIs, share it under SQLite's locking), and
// a folder per result, items/<dir>/: mesh.glb (the final mesh, the settings in its metadata),
// tokens.txt (the shape tokens, one line), timings.json (when the maker measured them: per-token
// and per-stage milliseconds), from the studio thumbnail.png, and concept.png and textured.glb once
// a concept image was made and applied. A result's files are written
// under a temporary name and renamed into place before its row is inserted, so every row's files
// exist; a crash between the two leaves a folder without a row, which open() removes once it is a
// minute old (younger ones may be another process's, about to get their row); a crash while writing
// leaves a temporary folder, which open() removes once its process is gone.
//
// The catalogue also journals the jobs that are running (begin_job / end_job): a job whose process
// died (a kill, a crash, a power cut) stays in the journal, and the next start of a front end takes
// it (take_interrupted) to say what was interrupted and offer it again.
//
// Results go to the trash (trash(), restore()) and leave it only by empty_trash(), which deletes
// their files. Ids are the catalogue's row ids (stable, never reused).
//
// Threads: one Library per thread (or guard it); any number of Library objects, in any processes,
// may use the same folder at once (a busy catalogue is waited for, up to 10 s).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/mesh/mesh.h"

struct sqlite3;

namespace tessera::runtime {

// TESSERA_LIBRARY, else XDG_DATA_HOME/tessera/library, else ~/.local/share/tessera/library.
std::string default_library_dir();
// The folder a front end uses when its user chose `chosen` (the studio's Settings; "": none):
// TESSERA_LIBRARY still wins (scripts and tests), then `chosen`, then the default above.
std::string library_dir(const std::string& chosen);
// True when TESSERA_LIBRARY decides the folder (a front end's own choice is then not used).
bool library_dir_from_environment();

struct LibraryEntry {
  int64_t id = 0;
  std::string folder;      // absolute: items/<dir>
  int64_t created_ms = 0;  // Unix time
  std::string prompt;
  std::string name;         // the artist's own title ("": none)
  std::string model;        // the model's name as the metadata records it
  nlohmann::json settings;  // runtime::shape_settings_json of the result
  std::string group;        // results of one job (its variations) share it
  int candidate = 0;
  uint64_t seed = 0;
  int64_t vertices = 0, triangles = 0;
  bool favourite = false;
  std::optional<int64_t> trashed_ms;
  std::string mesh_file() const { return folder + "/mesh.glb"; }
  std::string tokens_file() const { return folder + "/tokens.txt"; }
  std::string thumbnail_file() const { return folder + "/thumbnail.png"; }  // may not exist
  std::string timings_file() const { return folder + "/timings.json"; }     // may not exist
  std::string concept_file() const { return folder + "/concept.png"; }      // may not exist
  std::string textured_file() const { return folder + "/textured.glb"; }    // may not exist
};

// A result to keep.
struct NewResult {
  std::string prompt;
  std::string model;
  nlohmann::json settings;  // shape_settings_json (the mesh file carries it too)
  std::string group;        // "": a group of its own
  int candidate = 0;
  uint64_t seed = 0;
  const mesh::Mesh* mesh = nullptr;  // not null, with triangles
  std::vector<int32_t> tokens;
  std::vector<uint8_t> thumbnail_png;  // a PNG file's bytes (the studio's); empty: none
  // How it was made, for replays: {"token_ms": [...], "stage_ms": {...}, "total_ms": ...,
  // "backend": ...}; null: not measured (no timings.json).
  nlohmann::json timings;
};

// A job in the journal: begun by a front end and not ended.
struct JournalJob {
  int64_t id = 0;
  int64_t started_ms = 0;  // Unix time
  std::string prompt;
  nlohmann::json
      settings;  // shape_settings_json of its first candidate (restored_settings reads it)
  int variations = 1;
};

struct LibraryQuery {
  std::string text;         // in the prompt or the name (case-insensitive); "": any
  std::string model;        // exact; "": any
  bool trash = false;       // the trash instead of the library
  int64_t limit = 0;        // 0: all; newest first
  int64_t since_ms = 0;     // made at or after this Unix time; 0: any
  bool favourites = false;  // favourites only
};

class Library {
 public:
  // Opens (creating) the library in `dir`. Errors name the folder or the catalogue and the fault
  // (read-only folder, a file that is not a catalogue, a full disk).
  static Expected<std::unique_ptr<Library>> open(const std::string& dir);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const std::string& dir() const { return dir_; }
  // Keeps a result (files first, then the row); its id.
  Expected<int64_t> add(const NewResult& result);
  Expected<std::vector<LibraryEntry>> list(const LibraryQuery& query = {});
  Expected<LibraryEntry> get(int64_t id);
  Status rename(int64_t id, const std::string& name);
  Status set_favourite(int64_t id, bool favourite);
  // Writes (replaces) result `id`'s thumbnail.png: for results kept without one (the command line
  // makes none), once a front end has drawn them.
  Status set_thumbnail(int64_t id, const std::vector<uint8_t>& png);
  // What came after the shape: the prompt's concept image (concept.png, a PNG file's bytes) and the
  // mesh textured with it (textured.glb, with the result's settings), each written atomically.
  Status set_concept(int64_t id, const std::vector<uint8_t>& png);
  Status set_textured(int64_t id, const mesh::Mesh& textured);
  Status trash(int64_t id);
  Status restore(int64_t id);
  // Deletes what is in the trash (rows, then files); how many.
  Expected<int64_t> empty_trash();
  // PRAGMA integrity_check, and every row's files exist. The first fault found.
  Status check();
  // A number that changes whenever another connection (another studio, a CLI) changed the
  // catalogue since the last call (SQLite's data_version): cheap enough to poll.
  Expected<int64_t> data_version();

  // The journal. begin_job records a job this process is running (its id); end_job removes it when
  // the job ends in any way.
  Expected<int64_t> begin_job(const std::string& prompt, const nlohmann::json& settings,
                              int variations);
  Status end_job(int64_t id);
  // Every job in the journal, running or not (oldest first).
  Expected<std::vector<JournalJob>> journal();
  // The journal's jobs whose process is gone (not running on this machine since its last boot),
  // oldest first, removed from the journal: each is reported once.
  Expected<std::vector<JournalJob>> take_interrupted();

 private:
  Library(std::string dir, sqlite3* db) : dir_(std::move(dir)), db_(db) {}
  Status exec(const std::string& sql);
  Status set_trashed(int64_t id, bool trashed);
  Status write_beside(int64_t id, const char* file, const std::vector<uint8_t>& bytes);
  Expected<std::vector<JournalJob>> take_interrupted_locked();
  Expected<std::vector<JournalJob>> read_journal(bool gone_only);
  std::string dir_;
  sqlite3* db_ = nullptr;
};

}  // namespace tessera::runtime
