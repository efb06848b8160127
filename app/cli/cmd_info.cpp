// `tessera info <checkpoint.safetensors> [--json] [--summary]`: what a checkpoint holds.
//
// Prints the file summary (tensor count, parameters, bytes, dtypes, metadata, inferred model kind
// and config), then one aligned row per tensor (name, dtype, shape, bytes) in file order, then a
// totals line, so the essentials are visible at both ends of a long listing. --summary leaves out
// the per-tensor rows; --json prints the same content as one JSON object. Only the header is read,
// so this takes milliseconds even for multi-gigabyte files.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/runtime/user_text.h"
#include <string>

#include "app/cli/commands.h"
#include "core/checkpoint_kind.h"
#include "core/safetensors.h"

namespace tessera::cli {

namespace {

// 1234567 -> "1,234,567".
std::string with_separators(uint64_t v) {
  std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// "7.17 GB" style (decimal units, as file managers and model cards state sizes).
std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::string config_string(const CheckpointKindInfo& kind) {
  std::string s;
  for (const auto& [key, value] : kind.config) {
    if (!s.empty()) s += ' ';
    s += key + "=" + std::to_string(value);
  }
  return s;
}

struct DTypeTotals {
  uint64_t tensors = 0;
  uint64_t elements = 0;
};

std::map<std::string, DTypeTotals> totals_by_dtype(const SafeTensors& st) {
  std::map<std::string, DTypeTotals> out;
  for (const auto& t : st.tensors()) {
    auto& d = out[dtype_name(t.dtype)];
    d.tensors += 1;
    d.elements += static_cast<uint64_t>(t.numel());
  }
  return out;
}

void print_text(const std::string& path, const SafeTensors& st, const CheckpointKindInfo& kind,
                bool summary_only) {
  const uint64_t params = st.total_elements();
  std::printf("file:        %s\n", path.c_str());
  std::printf("tensors:     %s\n", with_separators(st.size()).c_str());
  std::printf("parameters:  %s\n", with_separators(params).c_str());
  std::printf("bytes:       %s (%s); header %s bytes\n", with_separators(st.total_bytes()).c_str(),
              human_bytes(st.total_bytes()).c_str(),
              with_separators(st.data_section_offset()).c_str());
  std::string dtypes;
  for (const auto& [name, d] : totals_by_dtype(st)) {
    if (!dtypes.empty()) dtypes += ", ";
    dtypes += name + " x" + std::to_string(d.tensors) + " (" + with_separators(d.elements) + ")";
  }
  std::printf("dtypes:      %s\n", dtypes.empty() ? "-" : dtypes.c_str());
  if (st.metadata().empty()) std::printf("metadata:    -\n");
  bool first = true;
  for (const auto& [key, value] : st.metadata()) {
    std::printf("%s%s = %s\n", first ? "metadata:    " : "             ", key.c_str(),
                value.c_str());
    first = false;
  }
  std::printf("kind:        %s%s%s\n", kind.name.c_str(), kind.version.empty() ? "" : " ",
              kind.version.c_str());
  if (!kind.prefix.empty()) std::printf("prefix:      %s\n", kind.prefix.c_str());
  if (!kind.config.empty()) std::printf("config:      %s\n", config_string(kind).c_str());
  for (const auto& note : kind.notes) std::printf("note:        %s\n", note.c_str());

  if (summary_only || st.empty()) return;
  // Column widths from the data (names can be long: CompVis keys exceed 90 characters).
  size_t name_w = 4;
  size_t shape_w = 5;
  size_t bytes_w = 5;
  for (const auto& t : st.tensors()) {
    name_w = std::max(name_w, t.name.size());
    shape_w = std::max(shape_w, t.shape_string().size());
    bytes_w = std::max(bytes_w, with_separators(t.nbytes).size());
  }
  const int nw = static_cast<int>(name_w);
  const int sw = static_cast<int>(shape_w);
  const int bw = static_cast<int>(bytes_w);
  std::printf("\n%-*s  %-5s  %-*s  %*s\n", nw, "name", "dtype", sw, "shape", bw, "bytes");
  for (const auto& t : st.tensors()) {
    std::printf("%-*s  %-5s  %-*s  %*s\n", nw, t.name.c_str(), dtype_name(t.dtype), sw,
                t.shape_string().c_str(), bw, with_separators(t.nbytes).c_str());
  }
  std::printf("\n%s tensors, %s parameters, %s\n", with_separators(st.size()).c_str(),
              with_separators(params).c_str(), human_bytes(st.total_bytes()).c_str());
}

void print_json(const std::string& path, const SafeTensors& st, const CheckpointKindInfo& kind,
                bool summary_only) {
  nlohmann::ordered_json out;
  out["file"] = runtime::display_path(path);
  out["num_tensors"] = st.size();
  out["parameters"] = st.total_elements();
  out["bytes"] = st.total_bytes();
  out["header_bytes"] = st.data_section_offset();
  nlohmann::ordered_json dtypes = nlohmann::ordered_json::object();
  for (const auto& [name, d] : totals_by_dtype(st))
    dtypes[name] = {{"tensors", d.tensors}, {"elements", d.elements}};
  out["dtypes"] = std::move(dtypes);
  out["metadata"] = st.metadata();
  nlohmann::ordered_json k;
  k["name"] = kind.name;
  k["version"] = kind.version;
  k["prefix"] = kind.prefix;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  for (const auto& [key, value] : kind.config) config[key] = value;
  k["config"] = std::move(config);
  k["notes"] = kind.notes;
  out["kind"] = std::move(k);
  if (!summary_only) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : st.tensors()) {
      list.push_back({{"name", t.name},
                      {"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"offset", t.offset},
                      {"bytes", t.nbytes}});
    }
    out["tensors"] = std::move(list);
  }
  // Names and metadata were validated as UTF-8 by the reader, so dump() cannot throw here.
  std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace

void register_info(CLI::App& app, int* exit_code) {
  struct Options {
    std::string path;
    bool json = false;
    bool summary = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "info", "List a .safetensors checkpoint: tensors, parameters, metadata, model kind");
  cmd->add_option("checkpoint", opts->path, "Path to a .safetensors file")->required();
  cmd->add_flag("--json", opts->json, "Print one JSON object instead of text");
  cmd->add_flag("--summary", opts->summary, "Leave out the per-tensor listing");
  cmd->callback([opts, exit_code] {
    auto st = SafeTensors::open(opts->path);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera info: %s\n", st.status().message().c_str());
      *exit_code = 1;
      return;
    }
    const CheckpointKindInfo kind = infer_checkpoint_kind(*st);
    if (opts->json)
      print_json(opts->path, *st, kind, opts->summary);
    else
      print_text(opts->path, *st, kind, opts->summary);
    std::fflush(stdout);
    *exit_code = 0;
  });
}

}  // namespace tessera::cli
