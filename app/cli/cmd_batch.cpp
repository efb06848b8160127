// tessera batch: many prompts (and variations of each) to mesh files, resumable, shardable, with a
// manifest, through the runtime like every front end.
//
//   tessera batch PROMPTS --out DIR [--variations N] [--shard I/N] [--format glb|obj|fbx]
//                 [--seed S] [--temperature T] [--top-k K] [--top-p P] [--guidance G]
//                 [--resolution R] [--up-axis y|z] [--scale F] [--max-faces N] [--model DIR] ...
//   tessera batch PROMPTS --out DIR --merge N     (after N shards: one checked manifest)
//
// PROMPTS: one item a line. A line starting with '{' is JSON: {"prompt": "...", "seed": 7,
// "variations": 4, "guidance": 3, "temperature": 1, "top_k": 0, "top_p": 0.9, "resolution": 65,
// "name": "chair"} (only "prompt" required; any other key is an error); any other line is a prompt.
// A JSON line with "kind": "image" is an image (engine/runtime/image_request.h's fields, its
// pictures as PNG paths relative to PROMPTS' folder, plus "name"): a PNG with its settings, the
// image model loaded before the first such line.
// Empty lines and lines starting with '#' are not items. Items are numbered 0, 1, ... in file
// order, bad ones included, so that the numbering (and the sharding) does not depend on which lines
// are valid. A bad line (invalid JSON, unknown key, wrong type or range, empty prompt, a name used
// twice) is reported as PROMPTS:LINE and skipped; the rest of the batch runs, and the exit status
// is 1.
//
// Seeds and sampling as `tessera generate`: greedy unless a sampling option (here or in the item)
// or variations > 1 is given; the item's seed, else --seed (default 0); variation i gets seed
// S + i - 1, so `tessera generate --prompt P --seed S+i-1` remakes any candidate alone.
//
// Shard I/N (0 <= I < N): the items whose number is I modulo N. Each shard writes its own manifest
// (DIR/manifest.jsonl for 0/1, else DIR/manifest-I-of-N.jsonl), so shards may share DIR.
//
// Files: DIR/NNNN_<prompt words>[_s<seed>].<ext> (or the item's name), written atomically (a
// temporary file, fsync, rename). The manifest gets one JSON line per candidate after its file is
// in place (prompt, seed, settings, model name and checksums, file, its SHA-256, timings), appended
// and fsynced line by line. Resuming: a rerun reads the manifest, keeps the entries whose file is
// there with the recorded SHA-256 (and whose prompt and seed still match the item), drops a torn
// last line or stale entries (rewriting the manifest atomically), removes temporary files of the
// items it is about to make, and makes only what is missing. So after kill -9 at any moment a rerun
// completes with no duplicate entry, no half-written file and no lost item.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/shape_cli.h"
#include "core/mapped_file.h"
#include "core/sha256.h"
#include "engine/mesh/export.h"
#include "core/png.h"
#include "engine/runtime/image_request.h"
#include "engine/runtime/job_request.h"
#include "engine/runtime/library.h"
#include "engine/runtime/provenance.h"
#include "engine/runtime/session.h"
#include "engine/runtime/user_text.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct BatchCliOptions {
  std::string prompts;
  std::string out;
  int variations = 1;
  std::string shard = "0/1";
  std::string format;  // "": the preset's first format, else glb
  // Seed, temperature, top-k, top-p, guidance; sampling.sample: a sampling option was given.
  SamplingSettings sampling = runtime::kDefaultSampling;
  int resolution = 0;
  bool bf16 = false;
  bool library = false;  // --library: also keep every result in the library
  std::string model;
  int merge = 0;  // --merge N
  DeviceCli device;
  MeshExportCli exporting;
};

// One line of PROMPTS that is an item.
struct Item {
  int64_t index = 0;  // 0-based among the item lines
  int64_t line = 0;   // 1-based line number
  std::string prompt, name;
  int variations = 1;
  // The seed is the base seed: candidate c samples with seed + c.
  SamplingSettings sampling = runtime::kDefaultSampling;
  int resolution = 0;
  std::string error;  // not empty: a bad line (reported, skipped)
  std::string note;   // what the text rule repaired in the line (reported; the item runs)
  // An image item ("kind": "image"): its job; one PNG (candidate 0).
  std::shared_ptr<runtime::ImageJobOptions> image;
  std::string init_name, mask_name, control_name;  // its pictures' files, for the PNG's settings
};

// "a Red chair!" -> "a-red-chair" (at most 40 characters; "item" when nothing is left).
std::string slug(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) && c < 128) {
      out += static_cast<char>(std::tolower(c));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
    if (out.size() >= 40) break;
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "item" : out;
}

std::string item_file(const Item& item, int candidate, const std::string& ext) {
  char number[32];
  std::snprintf(number, sizeof(number), "%04lld", static_cast<long long>(item.index));
  std::string stem = item.name.empty() ? std::string(number) + "_" + slug(item.prompt) : item.name;
  if (item.sampling.sample)
    stem += "_s" + std::to_string(item.sampling.seed + static_cast<uint64_t>(candidate));
  return stem + "." + (item.image ? std::string("png") : ext);  // an image item is a PNG
}

// Reads a JSON item's fields (runtime/job_request.h) over the command line's defaults. Returns the
// error, or "".
std::string parse_json_item(const std::string& text, const std::string& dir, Item* item) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return "invalid JSON";
  if (!j.is_object()) return "a JSON line must be an object";
  if (j.contains("kind") && j["kind"] == "image") {
    if (j.contains("name")) {
      if (!j["name"].is_string()) return "\"name\" must be a string";
      item->name = j["name"].get<std::string>();
      if (item->name.empty() || item->name.find('/') != std::string::npos || item->name[0] == '.') {
        return "\"name\" must be a plain file name";
      }
      j.erase("name");
    }
    auto image = runtime::parse_image_request(j, dir);
    if (!image.ok()) return image.status().message();
    if (!j.contains("seed")) image->seed = item->sampling.seed;  // --seed, else 0
    const auto file_name = [&](const char* key) {
      return j.contains(key) ? fs::path(j[key].get<std::string>()).filename().string()
                             : std::string();
    };
    item->init_name = file_name("init_image");
    item->mask_name = file_name("mask");
    item->control_name = file_name("control_image");
    item->prompt = image->prompt;
    item->variations = 1;
    item->sampling.sample = false;
    item->sampling.seed = image->seed;  // what the manifest's "seed" is checked against
    item->image = std::make_shared<runtime::ImageJobOptions>(std::move(*image));
    return "";
  }
  runtime::JobRequest base;
  base.variations = item->variations;
  base.sampling = item->sampling;
  base.resolution = item->resolution;
  auto request = runtime::parse_job_request(j, {}, base);
  if (!request.ok()) return request.status().message();
  item->prompt = request->prompt;
  item->name = request->name;
  item->variations = request->variations;
  item->sampling = request->sampling;
  item->resolution = request->resolution;
  return "";
}

Expected<std::vector<Item>> read_items(const BatchCliOptions& o) {
  Expected<std::string> text = read_file(o.prompts);
  if (!text.ok()) return Status(text.status()).with_context("PROMPTS");
  std::vector<Item> items;
  std::set<std::string> names;
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos <= text->size()) {
    size_t end = text->find('\n', pos);
    if (end == std::string::npos) end = text->size();
    std::string line = text->substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') {
      if (end == text->size()) break;
      continue;
    }
    Item item;
    item.index = static_cast<int64_t>(items.size());
    item.line = line_no;
    item.variations = o.variations;
    item.sampling = o.sampling;
    item.resolution = o.resolution;
    if (line[first] == '{') {
      item.error = parse_json_item(line, fs::path(o.prompts).parent_path().string(), &item);
    } else {
      const size_t last = line.find_last_not_of(" \t");
      item.prompt = line.substr(first, last - first + 1);
    }
    // The text rule every front end shares (engine/runtime/user_text.h): repaired and said so,
    // or the line refused.
    if (item.error.empty()) {
      auto checked = runtime::check_user_text("prompt", item.prompt);
      if (!checked.ok()) {
        item.error = checked.status().message();
      } else {
        if (checked->changed()) item.note = "prompt: " + checked->repairs;
        item.prompt = std::move(checked->text);
      }
    }
    if (item.error.empty() && item.prompt.find_first_not_of(" ") == std::string::npos) {
      item.error = "empty prompt";
    }
    if (item.variations > 1) item.sampling.sample = true;
    if (item.image) item.image->prompt = item.prompt;
    if (item.error.empty()) {
      for (int c = 0; c < item.variations; ++c) {
        const std::string file = item_file(item, c, o.format);
        if (!names.insert(file).second) {
          item.error = "output file '" + file +
                       "' is already another item's (give a distinct "
                       "\"name\")";
          break;
        }
      }
    }
    items.push_back(std::move(item));
    if (end == text->size()) break;
  }
  return items;
}

Expected<std::pair<int64_t, int64_t>> parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    size_t used = 0;
    const long long i = std::stoll(text.substr(0, slash), &used);
    if (used != slash) throw std::invalid_argument("junk");
    const std::string rest = text.substr(slash + 1);
    const long long n = std::stoll(rest, &used);
    if (used != rest.size()) throw std::invalid_argument("junk");
    if (n < 1 || i < 0 || i >= n) throw std::out_of_range("range");
    return std::make_pair(static_cast<int64_t>(i), static_cast<int64_t>(n));
  } catch (const std::exception&) {
    return invalid_argument("--shard '" + text + "': expected I/N with 0 <= I < N (e.g. 0/4)");
  }
}

std::string manifest_path(const std::string& dir, int64_t shard, int64_t shards) {
  if (shards == 1) return (fs::path(dir) / "manifest.jsonl").string();
  return (fs::path(dir) /
          ("manifest-" + std::to_string(shard) + "-of-" + std::to_string(shards) + ".jsonl"))
      .string();
}

// The entries of a manifest file that still hold: parses every complete line, keeps those whose
// file exists with the recorded SHA-256. `rewrite` is set when anything was dropped (a torn last
// line, a stale entry, a duplicate).
// Failure lines ({"item", "line", "error"}: why an item made no file) are not entries; a run
// replaces them with its own.
struct Manifest {
  std::vector<json> entries;
  int64_t failures = 0;
  bool rewrite = false;
};

Manifest read_manifest(const std::string& path, const std::string& dir) {
  Manifest m;
  auto text = read_file(path);
  if (!text.ok()) return m;  // none yet
  std::set<std::pair<int64_t, int64_t>> seen;
  size_t pos = 0;
  while (pos < text->size()) {
    const size_t end = text->find('\n', pos);
    if (end == std::string::npos) {  // torn last line (killed while appending)
      m.rewrite = true;
      break;
    }
    json j = json::parse(text->substr(pos, end - pos), nullptr, false);
    pos = end + 1;
    if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_string()) {
      ++m.failures;
      continue;
    }
    const bool shaped = !j.is_discarded() && j.is_object() && j.contains("item") &&
                        j["item"].is_number_integer() && j.contains("candidate") &&
                        j["candidate"].is_number_integer() && j.contains("file") &&
                        j["file"].is_string() && j.contains("sha256") && j["sha256"].is_string();
    if (!shaped) {
      m.rewrite = true;
      continue;
    }
    const auto key = std::make_pair(j["item"].get<int64_t>(), j["candidate"].get<int64_t>());
    auto digest = sha256_file((fs::path(dir) / j["file"].get<std::string>()).string());
    if (!digest.ok() || *digest != j["sha256"].get<std::string>() || !seen.insert(key).second) {
      m.rewrite = true;
      continue;
    }
    m.entries.push_back(std::move(j));
  }
  return m;
}

Status write_manifest(const std::string& path, const std::vector<json>& entries) {
  std::string text;
  for (const json& e : entries) text += e.dump() + "\n";
  return write_file_atomic(path, text.data(), text.size());
}

// Appends one line and fsyncs it (O_APPEND: one write() per line).
Status append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return io_error(path + ": cannot open the manifest for appending");
  const std::string text = line + "\n";
  const ssize_t n = ::write(fd, text.data(), text.size());
  const bool ok = n == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  return ok ? Status() : io_error(path + ": manifest write failed");
}

// A manifest line saying why `item` made no file (its text is valid: error messages name fields,
// and the rule already repaired the prompt).
std::string failure_line(const Item& item, const std::string& error) {
  return json{{"item", item.index}, {"line", item.line}, {"error", runtime::display_path(error)}}
      .dump();
}

// Removes leftovers of an atomic write of `file` that was killed (file.tmp-PID).
void remove_partials(const std::string& dir, const std::string& file) {
  std::error_code ec;
  const std::string prefix = file + ".tmp-";
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) fs::remove(entry.path(), ec);
  }
}

std::string format_eta(double seconds) {
  if (seconds < 0) return "?";
  const long long s = static_cast<long long>(seconds + 0.5);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", s / 3600, (s / 60) % 60);
  } else {
    std::snprintf(text, sizeof(text), "%lldm%02llds", s / 60, s % 60);
  }
  return text;
}

// An image item: the image model loaded before the first one, the job run on the image lane, the
// PNG written atomically with its settings, then its manifest line. Returns the error, or "".
std::string make_image_item(runtime::Session& session, const Item& item, const BatchCliOptions& o,
                            const std::string& manifest, bool* model_loaded) {
  if (!*model_loaded) {
    runtime::ImageModelOptions load;
    load.device = o.device.choice();
    const runtime::Event end = session.wait_for(session.load_image_model(load));
    if (const auto* e = std::get_if<runtime::ErrorEvent>(&end.payload)) {
      return "image model: " + e->status.message();
    }
    *model_loaded = true;
  }
  const std::string file = item_file(item, 0, o.format);
  const std::string path = (fs::path(o.out) / file).string();
  remove_partials(o.out, file);
  std::shared_ptr<const mesh::TextureImage> image;
  runtime::ImageEvent made;
  std::string error;
  const uint64_t id = session.submit_image(*item.image);
  session.wait_for(id, [&](const runtime::Event& event) {
    if (const auto* r = std::get_if<runtime::ImageEvent>(&event.payload)) {
      made = *r;
    } else if (const auto* e = std::get_if<runtime::ErrorEvent>(&event.payload)) {
      error = e->status.message();
    } else if (const auto* c = std::get_if<runtime::CancelledEvent>(&event.payload)) {
      error = "cancelled: " + c->reason;
    }
  });
  if (!error.empty()) return error;
  if (made.image == nullptr) return "internal error: the image job ended without an image";
  runtime::ImageProvenance provenance =
      runtime::image_provenance(*item.image, made, session.image_model());
  provenance.init_name = item.init_name;
  provenance.mask_name = item.mask_name;
  provenance.control_name = item.control_name;
  auto png = runtime::image_png(made, provenance);
  if (!png.ok()) return png.status().message();
  if (Status st = write_file_atomic(path, png->data(), png->size()); !st.ok()) {
    return st.message();
  }
  auto digest = sha256_file(path);
  if (!digest.ok()) return digest.status().message();
  const json entry = {{"item", item.index},
                      {"line", item.line},
                      {"candidate", 0},
                      {"kind", "image"},
                      {"prompt", item.prompt},
                      {"seed", item.image->seed},
                      {"settings", runtime::image_settings_json(provenance)},
                      {"file", file},
                      {"sha256", *digest},
                      {"notes", made.notes},
                      {"timings_ms",
                       {{"text", made.text_ms},
                        {"encode", made.encode_ms},
                        {"denoise", made.denoise_ms},
                        {"vae", made.vae_ms}}}};
  if (Status a = append_line(manifest, entry.dump()); !a.ok()) return a.message();
  return "";
}

// --merge N: every item's candidates once over the N shard manifests, files present with their
// SHA-256; writes DIR/manifest.jsonl (atomically) only when complete.
int run_merge(const BatchCliOptions& o, const std::vector<Item>& items) {
  std::map<std::pair<int64_t, int64_t>, json> found;
  std::vector<std::string> problems;
  for (int s = 0; s < o.merge; ++s) {
    const std::string path = manifest_path(o.out, s, o.merge);
    if (!fs::exists(path)) {
      problems.push_back("shard " + std::to_string(s) + "/" + std::to_string(o.merge) +
                         ": no manifest " + path);
      continue;
    }
    Manifest m = read_manifest(path, o.out);
    if (m.rewrite) {
      problems.push_back(path + ": has torn, stale or duplicate lines (rerun that shard)");
    }
    for (json& e : m.entries) {
      const auto key = std::make_pair(e["item"].get<int64_t>(), e["candidate"].get<int64_t>());
      if (found.count(key) != 0) {
        problems.push_back("item " + std::to_string(key.first) + " candidate " +
                           std::to_string(key.second) + " appears in more than one shard");
      }
      found[key] = std::move(e);
    }
  }
  int64_t expected = 0;
  for (const Item& item : items) {
    if (!item.error.empty()) continue;
    for (int c = 0; c < item.variations; ++c) {
      ++expected;
      if (found.count({item.index, c}) == 0) {
        problems.push_back("missing: item " + std::to_string(item.index) + " (line " +
                           std::to_string(item.line) + ") candidate " + std::to_string(c + 1));
      }
    }
  }
  if (static_cast<int64_t>(found.size()) != expected) {
    problems.push_back(std::to_string(found.size()) + " entries for " + std::to_string(expected) +
                       " expected candidates");
  }
  if (!problems.empty()) {
    for (const std::string& p : problems) std::fprintf(stderr, "tessera batch: %s\n", p.c_str());
    std::fprintf(stderr, "tessera batch: merge incomplete (%zu problem(s)); nothing written\n",
                 problems.size());
    return 1;
  }
  std::vector<json> entries;
  for (auto& [key, e] : found) entries.push_back(std::move(e));
  const std::string path = manifest_path(o.out, 0, 1);
  if (Status st = write_manifest(path, entries); !st.ok()) {
    std::fprintf(stderr, "tessera batch: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("merged %d shards: %zu candidates of %zu items, every one once; wrote %s\n", o.merge,
              entries.size(), items.size(), path.c_str());
  return 0;
}

// What a shard has to make: its manifest (torn, stale and old failure lines dropped, this run's bad
// lines recorded), the candidates already there, and the items still to make.
struct ShardPlan {
  std::string manifest;
  std::set<std::pair<int64_t, int64_t>> done;  // (item, candidate) already made
  std::vector<const Item*> todo;               // items with a candidate still missing
  int64_t mine = 0;                            // the shard's valid items
};

Expected<ShardPlan> plan_shard(const BatchCliOptions& o, const std::vector<Item>& items,
                               int64_t shard_i, int64_t shard_n) {
  ShardPlan plan;
  plan.manifest = manifest_path(o.out, shard_i, shard_n);
  const std::string& manifest = plan.manifest;
  Manifest done = read_manifest(manifest, o.out);
  std::set<std::pair<int64_t, int64_t>>& done_keys = plan.done;
  std::vector<json> kept;
  std::vector<const Item*>& todo = plan.todo;
  int64_t& mine = plan.mine;
  for (const Item& item : items) {
    if (item.index % shard_n != shard_i || !item.error.empty()) continue;
    ++mine;
  }
  for (json& e : done.entries) {
    const int64_t index = e["item"].get<int64_t>(), cand = e["candidate"].get<int64_t>();
    const bool current = index >= 0 && index < static_cast<int64_t>(items.size()) &&
                         (items)[static_cast<size_t>(index)].error.empty() &&
                         index % shard_n == shard_i;
    const Item* item = current ? &(items)[static_cast<size_t>(index)] : nullptr;
    const bool matches =
        item != nullptr && cand >= 0 && cand < item->variations &&
        e.value("prompt", "") == item->prompt &&
        e.value("seed", uint64_t{0}) == item->sampling.seed + static_cast<uint64_t>(cand) &&
        e.value("file", "") == item_file(*item, static_cast<int>(cand), o.format);
    if (!matches) {
      done.rewrite = true;
      continue;
    }
    done_keys.insert({index, cand});
    kept.push_back(std::move(e));
  }
  if (done.rewrite || done.failures > 0) {
    if (Status st = write_manifest(manifest, kept); !st.ok()) return st;
  }
  // The manifest says why each of this shard's bad lines made nothing.
  for (const Item& item : items) {
    if (item.index % shard_n != shard_i || item.error.empty()) continue;
    if (Status a = append_line(manifest, failure_line(item, item.error)); !a.ok()) {
      return a;
    }
  }
  for (const Item& item : items) {
    if (item.index % shard_n != shard_i || !item.error.empty()) continue;
    bool complete = true;
    for (int c = 0; c < item.variations; ++c)
      complete = complete && done_keys.count({item.index, c});
    if (!complete) todo.push_back(&item);
  }
  return plan;
}

int run_batch(BatchCliOptions o) {
  auto fail = [](const std::string& message, int code = 1) {
    std::fprintf(stderr, "tessera batch: %s\n", message.c_str());
    return code;
  };
  if (o.variations < 1 || o.variations > runtime::kMaxVariations) {
    return fail("--variations " + std::to_string(o.variations) + " outside [1, " +
                std::to_string(runtime::kMaxVariations) + "]");
  }
  if (Status st = check_sampling(o.sampling); !st.ok()) return fail(st.message());
  if (o.format.empty()) {
    const mesh::AssetPreset* p =
        o.exporting.preset.empty() ? nullptr : mesh::find_preset(o.exporting.preset);
    o.format = p != nullptr ? p->formats.front().substr(1) : "glb";
  }
  if (o.format != "glb" && o.format != "obj" && o.format != "fbx" && o.format != "stl" &&
      o.format != "3mf") {
    return fail("--format '" + o.format + "': expected glb, obj, fbx, stl or 3mf");
  }
  auto shard = parse_shard(o.shard);
  if (!shard.ok()) return fail(shard.status().message());
  if (o.resolution != 0) {
    if (auto k = runtime::resolution_base(o.resolution); !k.ok())
      return fail("--resolution: " + k.status().message());
  }
  std::error_code ec;
  if (!fs::is_directory(o.out, ec)) {
    if (o.merge > 0) return fail("--out '" + o.out + "' is not a directory");
    fs::create_directories(o.out, ec);
    if (ec) return fail("--out '" + o.out + "': cannot create the directory: " + ec.message());
  }
  auto export_options = checked_export_options(o.exporting, "item." + o.format);
  if (!export_options.ok()) return fail(export_options.status().message());
  auto texture = load_texture_option(o.exporting);
  if (!texture.ok()) return fail(texture.status().message());
  auto asset_export = cli_asset_export(*export_options, o.exporting, *texture);
  if (!asset_export.ok()) return fail(asset_export.status().message());
  const json export_json = runtime::export_record(*asset_export, nullptr);
  auto items = read_items(o);
  if (!items.ok()) return fail(items.status().message());
  int64_t bad = 0;
  for (const Item& item : *items) {
    if (!item.note.empty()) {
      std::fprintf(stderr, "%s:%lld: note: %s\n", o.prompts.c_str(),
                   static_cast<long long>(item.line), item.note.c_str());
    }
    if (item.error.empty()) continue;
    ++bad;
    std::fprintf(stderr, "%s:%lld: %s (skipped)\n", o.prompts.c_str(),
                 static_cast<long long>(item.line), item.error.c_str());
  }
  if (o.merge > 0) return run_merge(o, *items);
  const auto [shard_i, shard_n] = *shard;

  auto planned = plan_shard(o, *items, shard_i, shard_n);
  if (!planned.ok()) return fail(planned.status().message());
  const std::string& manifest = planned->manifest;
  const std::set<std::pair<int64_t, int64_t>>& done_keys = planned->done;
  const std::vector<const Item*>& todo = planned->todo;
  const int64_t mine = planned->mine;
  const int64_t already = mine - static_cast<int64_t>(todo.size());
  std::fprintf(stderr,
               "batch: shard %lld/%lld: %lld items (of %zu in %s), %lld done already, %zu to "
               "make; manifest %s\n",
               static_cast<long long>(shard_i), static_cast<long long>(shard_n),
               static_cast<long long>(mine), items->size(), o.prompts.c_str(),
               static_cast<long long>(already), todo.size(), manifest.c_str());
  if (todo.empty()) {
    std::printf("nothing to do: all %lld items of the shard are in %s\n",
                static_cast<long long>(mine), manifest.c_str());
    return bad > 0 ? 1 : 0;
  }

  auto session = runtime::Session::open(shape_model_options(
      o.model, o.bf16 ? runtime::ShapeWeights::kBF16 : runtime::ShapeWeights::kAuto, o.device));
  if (!session.ok()) return fail(session.status().message());
  const runtime::ShapeModelInfo model = *(*session)->shape_model();
  print_device(o.device, model.backend, model.backend_note);
  auto gpt_sha = sha256_file(model.shape_gpt_file);
  auto tok_sha = sha256_file(model.shape_tokenizer_file);
  if (!gpt_sha.ok()) return fail(gpt_sha.status().message());
  if (!tok_sha.ok()) return fail(tok_sha.status().message());
  const json model_json = {
      {"name", runtime::display_path(fs::path(model.path).filename().string())},
      {"weights", model.weights},
      {"gpt_sha256", *gpt_sha},
      {"tokenizer_sha256", *tok_sha}};

  std::unique_ptr<runtime::Library> library;
  if (o.library) {
    auto opened = runtime::Library::open(runtime::default_library_dir());
    if (!opened.ok()) return fail(opened.status().message());
    library = std::move(opened).value();
  }

  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const auto start = std::chrono::steady_clock::now();
  bool image_model_loaded = false;
  int64_t made = 0, failed = 0;
  for (const Item* item : todo) {
    std::string error;
    if (item->image) {
      error = make_image_item(**session, *item, o, manifest, &image_model_loaded);
    } else {
      runtime::JobOptions job;
      job.prompt = item->prompt;
      job.variations = item->variations;
      job.generation.sampling = item->sampling;
      job.mesh.resolution = item->resolution;
      job.mesh.cleanup.max_triangles = effective_max_faces(o.exporting);
      for (int c = 0; c < item->variations; ++c) {
        if (done_keys.count({item->index, c}) == 0)
          remove_partials(o.out, item_file(*item, c, o.format));
      }
      // Floats as the decimal the user wrote (0.9, not 0.8999999761581421).
      auto decimal = [](float v) { return std::stod(std::to_string(v)); };
      const SamplingSettings& sampling = item->sampling;
      json settings = {{"sample", sampling.sample},
                       {"temperature", decimal(sampling.temperature)},
                       {"top_k", sampling.top_k},
                       {"top_p", decimal(sampling.top_p)},
                       {"guidance", decimal(sampling.guidance)},
                       {"variations", item->variations},
                       {"format", o.format}};
      settings.update(export_json);  // up_axis, scale, max_faces, preset...
      double decode_ms = 0, text_ms = 0;
      std::map<int, double> mesh_ms;
      const uint64_t id = (*session)->submit(job);
      // One item's failure, even a bug's exception, fails its line; the rest of the batch goes on.
      try {
        (*session)->wait_for(id, [&](const runtime::Event& event) {
          if (const auto* s = std::get_if<runtime::StageEvent>(&event.payload)) {
            if (s->name == runtime::kStageDecode || s->name == runtime::kStagePrefill) {
              decode_ms += s->ms;
            } else if (s->name == runtime::kStageText) {
              text_ms += s->ms;
            } else {
              mesh_ms[s->candidate] += s->ms;
            }
          } else if (const auto* f = std::get_if<runtime::FinalMeshEvent>(&event.payload)) {
            if (!error.empty()) return;
            // A candidate finished by an interrupted run: its file and entry stand (same bits).
            if (done_keys.count({item->index, f->candidate}) != 0) return;
            const std::string file = item_file(*item, f->candidate, o.format);
            const std::string path = (fs::path(o.out) / file).string();
            Status st = write_cli_mesh(*f->mesh, path, *export_options, o.exporting, *texture);
            auto digest = st.ok() ? sha256_file(path) : Expected<std::string>(st);
            if (!digest.ok()) {
              error = digest.status().message();
              return;
            }
            json entry = {{"item", item->index},
                          {"line", item->line},
                          {"candidate", f->candidate},
                          {"prompt", item->prompt},
                          {"seed", f->seed},
                          {"settings", settings},
                          {"resolution", f->resolution},
                          {"model", model_json},
                          {"file", file},
                          {"sha256", *digest},
                          {"triangles", f->mesh->triangle_count()},
                          {"timings_ms",
                           {{"text", text_ms},
                            {"decode_all_candidates", decode_ms},
                            {"mesh", mesh_ms[f->candidate]}}}};
            if (library) {
              runtime::NewResult kept;
              kept.prompt = item->prompt;
              kept.model = model_json["name"].get<std::string>();
              kept.settings =
                  runtime::shape_settings_json(job, f->seed, f->resolution, kept.model, *gpt_sha);
              kept.group = manifest + "#" + std::to_string(item->index);
              kept.candidate = f->candidate;
              kept.seed = f->seed;
              kept.mesh = f->mesh.get();
              kept.tokens = f->tokens;
              if (auto added = library->add(kept); !added.ok()) {
                error = added.status().message();
                return;
              }
            }
            if (Status a = append_line(manifest, entry.dump()); !a.ok()) error = a.message();
          } else if (const auto* e = std::get_if<runtime::ErrorEvent>(&event.payload)) {
            error = e->status.message();
          } else if (const auto* c = std::get_if<runtime::CancelledEvent>(&event.payload)) {
            error = "cancelled: " + c->reason;
          }
        });
      } catch (const std::exception& e) {
        (*session)->cancel();
        error = std::string("internal error: ") + e.what();
      }
    }
    if (!error.empty()) {
      ++failed;
      if (error.find("manifest") == std::string::npos) {
        if (Status a = append_line(manifest, failure_line(*item, error)); !a.ok()) {
          return fail(a.message());
        }
      }
      std::fprintf(stderr, "%s%s:%lld: %s\n", tty ? "\n" : "", o.prompts.c_str(),
                   static_cast<long long>(item->line), error.c_str());
      if (error.find("manifest") != std::string::npos) return fail("stopping: " + error);
      continue;
    }
    ++made;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int64_t left = static_cast<int64_t>(todo.size()) - made - failed;
    const std::string eta =
        format_eta(elapsed / static_cast<double>(made + failed) * static_cast<double>(left));
    const long long done_items = already + made;
    if (tty) {
      std::fprintf(stderr, "\r[batch] %lld/%lld items  ETA %s   ", done_items,
                   static_cast<long long>(mine), eta.c_str());
    } else {
      std::fprintf(stderr, "[batch] %lld/%lld items  ETA %s  (%s)\n", done_items,
                   static_cast<long long>(mine), eta.c_str(),
                   item_file(*item, 0, o.format).c_str());
    }
    std::fflush(stderr);
  }
  if (tty) std::fputc('\n', stderr);
  std::printf("made %lld items, %lld were done already, %lld failed, %lld bad lines; manifest %s\n",
              static_cast<long long>(made), static_cast<long long>(already),
              static_cast<long long>(failed), static_cast<long long>(bad), manifest.c_str());
  return failed > 0 || bad > 0 ? 1 : 0;
}

}  // namespace

void register_batch(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<BatchCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "batch", "Generate meshes for a file of prompts: resumable, shardable, with a manifest");
  cmd->add_option("PROMPTS", o->prompts,
                  "Text file, one prompt a line, or JSON lines ({\"prompt\": ..., \"seed\": ...})")
      ->required();
  cmd->add_option("--out", o->out, "Output directory (created if missing)")->required();
  cmd->add_option("--variations", o->variations,
                  "Candidates per item (1-8; switches to sampling), seeds S..S+N-1");
  cmd->add_option("--shard", o->shard,
                  "I/N: make only the items whose number is I modulo N (0 <= I < N), e.g. "
                  "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT");
  cmd->add_option(
      "--format", o->format,
      "Mesh format: glb (default; the preset's first format with --preset), obj, fbx, stl or 3mf");
  cmd->add_option("--merge", o->merge,
                  "After N shards: check that every item's candidates are in the N shard "
                  "manifests once, with their files, and write DIR/manifest.jsonl")
      ->check(CLI::PositiveNumber);
  add_mesh_export_options(cmd, &o->exporting);
  cmd->add_flag("--library", o->library,
                "Also keep every result in the library (tessera library list)");
  cmd->add_option("--model,-m", o->model,
                  "Model directory, or a name from the Hugging Face cache (Roblox/cube3d-v0.5; "
                  "tessera models list); default: the embedded tessera-tiny");
  // The ranges are check_sampling's (core/sampling.h), checked in run_batch.
  auto* seed = cmd->add_option("--seed", o->sampling.seed,
                               "Base seed of items without one (switches to sampling)");
  auto* temperature = cmd->add_option("--temperature", o->sampling.temperature,
                                      "Sampling temperature > 0 (sampling)");
  auto* top_k = cmd->add_option("--top-k", o->sampling.top_k, "Top-k, 0: all (sampling)");
  auto* top_p =
      cmd->add_option("--top-p", o->sampling.top_p, "Nucleus threshold in (0, 1], default 0.9");
  cmd->add_option("--guidance", o->sampling.guidance, "Classifier-free guidance scale (default 3)");
  cmd->add_option("--resolution,-r", o->resolution,
                  "Extraction lattice points per axis, 2^k+1 (default: the model's)");
  cmd->add_flag("--bf16", o->bf16,
                "Convert the weights to bf16 once at load (default: automatic, bf16 for large "
                "models)");
  add_device_options(cmd, &o->device);
  cmd->callback([o, exit_code, seed, temperature, top_k, top_p] {
    o->sampling.sample = seed->count() + temperature->count() + top_k->count() + top_p->count() > 0;
    *exit_code = run_batch(*o);
  });
}

}  // namespace tessera::cli
