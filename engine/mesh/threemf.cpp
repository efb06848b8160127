#include "engine/mesh/threemf.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "core/utf8.h"

#if TESSERA_HAVE_LIB3MF
#include <Model/COM/NMR_DLLInterfaces.h>
#endif

namespace tessera::mesh {

#if TESSERA_HAVE_LIB3MF
namespace {

using namespace NMR;

// Owns one lib3mf instance (released on scope exit).
class Handle {
 public:
  Handle() = default;
  explicit Handle(PLib3MFBase* p) : p_(p) {}
  ~Handle() {
    if (p_ != nullptr) lib3mf_release(p_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  PLib3MFBase** out() { return &p_; }
  PLib3MFBase* get() const { return p_; }

 private:
  PLib3MFBase* p_ = nullptr;
};

// The error of a failed call on `object` (lib3mf keeps the last error per instance).
std::string last_error(PLib3MFBase* object, LIB3MFRESULT result) {
  DWORD code = 0;
  LPCSTR message = nullptr;
  if (object != nullptr && lib3mf_getlasterror(object, &code, &message) == LIB3MF_OK &&
      message != nullptr && message[0] != '\0') {
    return std::string(message) + " (lib3mf error " + std::to_string(code) + ")";
  }
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%08x", static_cast<unsigned>(result));
  return std::string("lib3mf error ") + hex;
}

const double kUnitMetres[] = {1e-6, 1e-3, 1e-2, 0.0254, 0.3048, 1.0};

// Debian's lib3mf 1.8 writes a metadata value into the XML as it is given and hands back the
// text between the tags as it is found, entities included. So a '<' or '&' in a prompt made
// malformed XML (other readers refused the file; lib3mf itself dropped "<cube>" or failed on a long
// value): values are escaped here before lib3mf writes them and unescaped after it reads them.
std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '<':
        out.append("&lt;");
        break;
      case '>':
        out.append("&gt;");
        break;
      case '&':
        out.append("&amp;");
        break;
      case '"':
        out.append("&quot;");
        break;
      case '\'':
        out.append("&apos;");
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// XML's five named references and numeric ones (&#65; &#x41;); anything else stays as it is.
std::string xml_unescape(const std::string& text) {
  static const std::pair<const char*, char> kNamed[] = {
      {"lt;", '<'}, {"gt;", '>'}, {"amp;", '&'}, {"quot;", '"'}, {"apos;", '\''}};
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out.push_back(text[i]);
      continue;
    }
    bool done = false;
    for (const auto& [name, c] : kNamed) {
      if (text.compare(i + 1, std::strlen(name), name) == 0) {
        out.push_back(c);
        i += std::strlen(name);
        done = true;
        break;
      }
    }
    if (!done && i + 2 < text.size() && text[i + 1] == '#') {
      const bool hex = text[i + 2] == 'x' || text[i + 2] == 'X';
      size_t j = i + (hex ? 3 : 2);
      uint32_t cp = 0;
      size_t digits = 0;
      for (; j < text.size() && digits < 8; ++j, ++digits) {
        const char d = text[j];
        int v = -1;
        if (d >= '0' && d <= '9') v = d - '0';
        if (hex && d >= 'a' && d <= 'f') v = d - 'a' + 10;
        if (hex && d >= 'A' && d <= 'F') v = d - 'A' + 10;
        if (v < 0) break;
        cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(v);
      }
      const bool valid_cp = cp > 0 && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
      if (digits > 0 && j < text.size() && text[j] == ';' && valid_cp) {
        append_utf8(out, static_cast<char32_t>(cp));
        i = j;
        done = true;
      }
    }
    if (!done) out.push_back('&');
  }
  return out;
}

}  // namespace

bool have_3mf() {
  return true;
}

Expected<std::string> to_3mf(const Mesh& mesh, const ExportOptions& options,
                             const Metadata& metadata) {
  TESSERA_RETURN_IF_ERROR(validate(mesh));
  TESSERA_RETURN_IF_ERROR(validate_export_options(options));
  if (mesh.vertex_count() > int64_t{UINT32_MAX} || mesh.triangle_count() > int64_t{UINT32_MAX}) {
    return invalid_argument("3MF: the mesh is too large for lib3mf's counts");
  }
  auto unit = MODELUNIT_METER;
  switch (options.unit) {
    case LengthUnit::kMetre:
      unit = MODELUNIT_METER;
      break;
    case LengthUnit::kCentimetre:
      unit = MODELUNIT_CENTIMETER;
      break;
    case LengthUnit::kMillimetre:
      unit = MODELUNIT_MILLIMETER;
      break;
    case LengthUnit::kStud:
      return invalid_argument("3MF: the format's units are metric or imperial, not studs");
  }
  const Mesh m = transform_for_export(mesh, options);
  Handle model;
  LIB3MFRESULT r = lib3mf_createmodel(model.out());
  if (r != LIB3MF_OK) return internal_error("3MF: lib3mf could not create a model");
  auto fail = [&](PLib3MFBase* on, const char* what) {
    return internal_error(std::string("3MF: ") + what + ": " + last_error(on, r));
  };
  if ((r = lib3mf_model_setunit(model.get(), unit)) != LIB3MF_OK) {
    return fail(model.get(), "setting the unit");
  }
  Handle object;
  if ((r = lib3mf_model_addmeshobject(model.get(), object.out())) != LIB3MF_OK) {
    return fail(model.get(), "adding the mesh object");
  }
  lib3mf_object_setnameutf8(object.get(), "tessera");
  std::vector<MODELMESHVERTEX> vertices(static_cast<size_t>(m.vertex_count()));
  for (size_t v = 0; v < vertices.size(); ++v) {
    for (int c = 0; c < 3; ++c) vertices[v].m_fPosition[c] = m.positions[3 * v + c];
  }
  std::vector<MODELMESHTRIANGLE> triangles(static_cast<size_t>(m.triangle_count()));
  for (size_t t = 0; t < triangles.size(); ++t) {
    for (int c = 0; c < 3; ++c) triangles[t].m_nIndices[c] = m.triangles[3 * t + c];
  }
  if ((r = lib3mf_meshobject_setgeometry(object.get(), vertices.data(),
                                         static_cast<DWORD>(vertices.size()), triangles.data(),
                                         static_cast<DWORD>(triangles.size()))) != LIB3MF_OK) {
    return fail(object.get(), "setting the geometry");
  }
  Handle item;
  if ((r = lib3mf_model_addbuilditem(model.get(), object.get(), nullptr, item.out())) !=
      LIB3MF_OK) {
    return fail(model.get(), "adding the build item");
  }
  const std::string application = std::string("Tessera ") + TESSERA_VERSION;
  if ((r = lib3mf_model_addmetadatautf8(model.get(), "Application", application.c_str())) !=
      LIB3MF_OK) {
    return fail(model.get(), "adding metadata Application");
  }
  for (const auto& [key, value] : metadata) {
    if ((r = lib3mf_model_addmetadatautf8(model.get(), xml_escape(key).c_str(),
                                          xml_escape(value).c_str())) != LIB3MF_OK) {
      return invalid_argument("3MF: metadata '" + key + "': " + last_error(model.get(), r));
    }
  }
  Handle writer;
  if ((r = lib3mf_model_querywriter(model.get(), "3mf", writer.out())) != LIB3MF_OK) {
    return fail(model.get(), "creating the writer");
  }
  ULONG64 size = 0;
  if ((r = lib3mf_writer_getstreamsize(writer.get(), &size)) != LIB3MF_OK) {
    return fail(writer.get(), "sizing the package");
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  if ((r = lib3mf_writer_writetobuffer(writer.get(), reinterpret_cast<BYTE*>(bytes.data()),
                                       size)) != LIB3MF_OK) {
    return fail(writer.get(), "writing the package");
  }
  return bytes;
}

Expected<ThreeMfFile> parse_3mf(std::string_view bytes, const std::string& name) {
  if (bytes.size() < 4 || bytes.substr(0, 2) != "PK") {
    return corrupt_data(name + ": not a 3MF file (a 3MF is a zip package; no \"PK\" signature)");
  }
  Handle model;
  LIB3MFRESULT r = lib3mf_createmodel(model.out());
  if (r != LIB3MF_OK) return internal_error(name + ": lib3mf could not create a model");
  Handle reader;
  if ((r = lib3mf_model_queryreader(model.get(), "3mf", reader.out())) != LIB3MF_OK) {
    return internal_error(name + ": lib3mf has no 3MF reader: " + last_error(model.get(), r));
  }
  // lib3mf takes a non-const buffer; it only reads it.
  std::string copy(bytes);
  if ((r = lib3mf_reader_readfrombuffer(reader.get(), reinterpret_cast<BYTE*>(copy.data()),
                                        copy.size())) != LIB3MF_OK) {
    return corrupt_data(name + ": " + last_error(reader.get(), r));
  }
  ThreeMfFile file;
  DWORD unit = 1;
  if (lib3mf_model_getunit(model.get(), &unit) == LIB3MF_OK && unit <= 5) {
    file.unit_metres = kUnitMetres[unit];
  }
  DWORD count = 0;
  if (lib3mf_model_getmetadatacount(model.get(), &count) == LIB3MF_OK) {
    for (DWORD i = 0; i < count; ++i) {
      ULONG key_len = 0, value_len = 0;
      if (lib3mf_model_getmetadatakeyutf8(model.get(), i, nullptr, 0, &key_len) != LIB3MF_OK ||
          lib3mf_model_getmetadatavalueutf8(model.get(), i, nullptr, 0, &value_len) != LIB3MF_OK) {
        continue;
      }
      std::string key(key_len + 1, '\0'), value(value_len + 1, '\0');
      lib3mf_model_getmetadatakeyutf8(model.get(), i, key.data(), key_len + 1, &key_len);
      lib3mf_model_getmetadatavalueutf8(model.get(), i, value.data(), value_len + 1, &value_len);
      key.resize(std::strlen(key.c_str()));
      value.resize(std::strlen(value.c_str()));
      file.metadata.emplace_back(xml_unescape(key), xml_unescape(value));
    }
  }
  Handle items;
  if ((r = lib3mf_model_getbuilditems(model.get(), items.out())) != LIB3MF_OK) {
    return corrupt_data(name + ": " + last_error(model.get(), r));
  }
  for (;;) {
    BOOL has_next = 0;
    if (lib3mf_builditemiterator_movenext(items.get(), &has_next) != LIB3MF_OK || !has_next) break;
    Handle item;
    if (lib3mf_builditemiterator_getcurrent(items.get(), item.out()) != LIB3MF_OK) break;
    Handle object;
    if (lib3mf_builditem_getobjectresource(item.get(), object.out()) != LIB3MF_OK) continue;
    BOOL is_mesh = 0;
    if (lib3mf_object_ismeshobject(object.get(), &is_mesh) != LIB3MF_OK || !is_mesh) continue;
    MODELTRANSFORM transform{};
    BOOL has_transform = 0;
    lib3mf_builditem_hasobjecttransform(item.get(), &has_transform);
    if (has_transform) lib3mf_builditem_getobjecttransform(item.get(), &transform);
    DWORD nv = 0, nt = 0;
    if (lib3mf_meshobject_getvertexcount(object.get(), &nv) != LIB3MF_OK ||
        lib3mf_meshobject_gettrianglecount(object.get(), &nt) != LIB3MF_OK) {
      return corrupt_data(name + ": unreadable mesh object");
    }
    std::vector<MODELMESHVERTEX> vertices(nv);
    std::vector<MODELMESHTRIANGLE> triangles(nt);
    DWORD got = 0;
    if ((nv > 0 &&
         lib3mf_meshobject_getvertices(object.get(), vertices.data(), nv, &got) != LIB3MF_OK) ||
        (nt > 0 && lib3mf_meshobject_gettriangleindices(object.get(), triangles.data(), nt, &got) !=
                       LIB3MF_OK)) {
      return corrupt_data(name + ": unreadable mesh object");
    }
    const auto base = static_cast<uint32_t>(file.mesh.vertex_count());
    for (const MODELMESHVERTEX& v : vertices) {
      float p[3];
      for (int row = 0; row < 3; ++row) {
        // 3MF's transforms are row vectors times a 4x3 matrix; lib3mf stores it as [3][4]
        // columns: p' = M[:, 0..2] . p + M[:, 3].
        p[row] = has_transform ? transform.m_fFields[row][0] * v.m_fPosition[0] +
                                     transform.m_fFields[row][1] * v.m_fPosition[1] +
                                     transform.m_fFields[row][2] * v.m_fPosition[2] +
                                     transform.m_fFields[row][3]
                               : v.m_fPosition[row];
        if (!std::isfinite(p[row])) {
          return corrupt_data(name + ": a vertex has a non-finite coordinate");
        }
      }
      file.mesh.positions.insert(file.mesh.positions.end(), p, p + 3);
    }
    for (const MODELMESHTRIANGLE& t : triangles) {
      for (int c = 0; c < 3; ++c) {
        if (t.m_nIndices[c] >= nv) {
          return corrupt_data(name + ": a triangle names vertex " +
                              std::to_string(t.m_nIndices[c]) + " of " + std::to_string(nv));
        }
        file.mesh.triangles.push_back(base + t.m_nIndices[c]);
      }
    }
  }
  if (file.mesh.triangles.empty()) return not_found(name + ": the 3MF holds no mesh triangles");
  return file;
}

#else  // !TESSERA_HAVE_LIB3MF

bool have_3mf() {
  return false;
}
Expected<std::string> to_3mf(const Mesh&, const ExportOptions&, const Metadata&) {
  return unsupported("3MF: this build of Tessera has no lib3mf (install lib3mf-dev and rebuild)");
}
Expected<ThreeMfFile> parse_3mf(std::string_view, const std::string& name) {
  return unsupported(name +
                     ": this build of Tessera has no lib3mf (install lib3mf-dev and "
                     "rebuild)");
}

#endif

Status write_3mf(const Mesh& mesh, const std::string& path, const ExportOptions& options,
                 const Metadata& metadata) {
  Expected<std::string> bytes = to_3mf(mesh, options, metadata);
  if (!bytes.ok()) return bytes.status().with_context(path);
  return write_file_atomic(path, bytes->data(), bytes->size());
}

}  // namespace tessera::mesh
