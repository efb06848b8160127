#include "ui/render/renderer.h"

#include <GL/gl.h>
#include <GL/glext.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace tessera::render {

namespace {

// The surface pass: one program for all shading modes. The geometry shader computes, per
// fragment, the screen-space distance to the triangle's three edges (single-pass wireframe,
// Baerentzen et al., "Single-pass Wireframe Rendering", SIGGRAPH 2006 sketch), so the wireframe
// overlay needs neither a second pass nor glPolygonMode (absent from GL ES and flaky with offset).
constexpr const char* kSurfaceVertex = R"(#version 330 core
layout(location = 0) in vec3 a_position;
layout(location = 1) in vec3 a_normal;
layout(location = 2) in vec2 a_uv;
uniform mat4 u_view;
uniform mat4 u_projection;
out vec3 v_normal;
out vec2 v_uv;
out float v_view_z;
void main() {
  v_normal = a_normal;
  v_uv = a_uv;
  vec4 view_position = u_view * vec4(a_position, 1.0);
  v_view_z = -view_position.z;  // distance in front of the eye along the view axis
  gl_Position = u_projection * view_position;
}
)";

constexpr const char* kSurfaceGeometry = R"(#version 330 core
layout(triangles) in;
layout(triangle_strip, max_vertices = 3) out;
in vec3 v_normal[];
in vec2 v_uv[];
in float v_view_z[];
out vec3 g_normal;
out vec2 g_uv;
out float g_view_z;
noperspective out vec3 g_edge_distance;
flat out float g_min_altitude;
uniform vec2 u_viewport;
void main() {
  // Screen positions (pixels). A vertex behind the eye has no meaningful projection: then the
  // distances are set far away (no wire on that triangle) rather than producing garbage.
  bool behind = gl_in[0].gl_Position.w <= 0.0 || gl_in[1].gl_Position.w <= 0.0 ||
                gl_in[2].gl_Position.w <= 0.0;
  vec2 p0 = u_viewport * gl_in[0].gl_Position.xy / gl_in[0].gl_Position.w;
  vec2 p1 = u_viewport * gl_in[1].gl_Position.xy / gl_in[1].gl_Position.w;
  vec2 p2 = u_viewport * gl_in[2].gl_Position.xy / gl_in[2].gl_Position.w;
  vec2 e0 = p2 - p1, e1 = p2 - p0, e2 = p1 - p0;
  float area = abs(e1.x * e2.y - e1.y * e2.x);
  vec3 h = vec3(area / max(length(e0), 1e-6), area / max(length(e1), 1e-6),
                area / max(length(e2), 1e-6));
  if (behind) h = vec3(1e6);
  float min_altitude = min(h.x, min(h.y, h.z));
  g_normal = v_normal[0]; g_uv = v_uv[0]; g_view_z = v_view_z[0]; g_edge_distance = vec3(h.x, 0.0, 0.0);
  g_min_altitude = min_altitude;
  gl_Position = gl_in[0].gl_Position; EmitVertex();
  g_normal = v_normal[1]; g_uv = v_uv[1]; g_view_z = v_view_z[1]; g_edge_distance = vec3(0.0, h.y, 0.0);
  g_min_altitude = min_altitude;
  gl_Position = gl_in[1].gl_Position; EmitVertex();
  g_normal = v_normal[2]; g_uv = v_uv[2]; g_view_z = v_view_z[2]; g_edge_distance = vec3(0.0, 0.0, h.z);
  g_min_altitude = min_altitude;
  gl_Position = gl_in[2].gl_Position; EmitVertex();
  EndPrimitive();
}
)";

constexpr const char* kSurfaceFragment = R"(#version 330 core
in vec3 g_normal;
in vec2 g_uv;
in float g_view_z;
noperspective in vec3 g_edge_distance;
flat in float g_min_altitude;
uniform mat4 u_view;
uniform int u_mode;  // 0 lit, 1 normals, 2 matcap, 3 textured (lit with the texture as colour),
                     // 4 depth (inverse depth, 16-bit in red and green: ui/render/depth.h)
uniform float u_depth_near;
uniform vec3 u_base_color;
uniform bool u_has_texture;
uniform sampler2D u_texture;
uniform bool u_wireframe;
uniform vec3 u_wire_color;
uniform float u_wire_width;
out vec4 frag_color;
void main() {
  if (u_mode == 4) {
    // u_depth_near <= every visible point's depth, so v is in (0, 1]; blue marks coverage.
    float v = clamp(u_depth_near / max(g_view_z, 1e-6), 0.0, 1.0);
    float q = floor(v * 65535.0 + 0.5);
    float high = floor(q / 256.0);
    frag_color = vec4(high / 255.0, (q - high * 256.0) / 255.0, 1.0, 1.0);
    return;
  }
  vec3 n = normalize(g_normal);
  // Two-sided: partial meshes are open, so their inside shows; light it as a front face.
  vec3 nv = normalize(mat3(u_view) * n);
  if (!gl_FrontFacing) { n = -n; nv = -nv; }
  vec3 color;
  if (u_mode == 1) {
    color = n * 0.5 + 0.5;
  } else if (u_mode == 2) {
    // Procedural clay matcap: a soft key from the upper left, a cool rim, a small highlight.
    vec2 uv = nv.xy;
    float key = clamp(dot(nv, normalize(vec3(-0.45, 0.55, 0.70))), 0.0, 1.0);
    float rim = pow(1.0 - clamp(nv.z, 0.0, 1.0), 3.0);
    float spec = pow(clamp(1.0 - length(uv - vec2(-0.32, 0.42)) * 1.9, 0.0, 1.0), 6.0);
    color = vec3(0.55, 0.42, 0.36) * (0.28 + 0.85 * key) + vec3(0.30, 0.38, 0.50) * rim +
            vec3(0.9) * spec;
  } else {
    // View-space lights so the shape reads from every angle: key upper-left, fill lower-right.
    vec3 key_dir = normalize(vec3(-0.35, 0.55, 0.75));
    vec3 fill_dir = normalize(vec3(0.6, -0.25, 0.45));
    float key = max(dot(nv, key_dir), 0.0);
    float fill = max(dot(nv, fill_dir), 0.0);
    vec3 half_dir = normalize(key_dir + vec3(0.0, 0.0, 1.0));
    float spec = pow(max(dot(nv, half_dir), 0.0), 48.0);
    vec3 base = u_base_color;
    float spec_amount = 0.25;
    if (u_mode == 3 && u_has_texture) {
      // Mesh uvs have v up with v = 0 the image's bottom row; the texture's first row (t = 0) is
      // the image's top row.
      base = texture(u_texture, vec2(g_uv.x, 1.0 - g_uv.y)).rgb;
      spec_amount = 0.12;  // a painted surface: a softer highlight keeps the image's colours
      color = base * (0.42 + 0.50 * key + 0.18 * fill) + vec3(spec_amount) * spec;
    } else {
      color = base * (0.18 + 0.72 * key + 0.25 * fill) + vec3(spec_amount) * spec;
    }
  }
  if (u_wireframe) {
    float d = min(g_edge_distance.x, min(g_edge_distance.y, g_edge_distance.z));
    float cover = 1.0 - smoothstep(u_wire_width - 0.5, u_wire_width + 0.5, d);
    // Triangles only a few pixels across would turn solid wire colour: fade their edges so a dense
    // mesh reads as a light mesh pattern over the shading rather than a black blob.
    cover *= 0.85 * smoothstep(2.0, 8.0, g_min_altitude / u_wire_width);
    color = mix(color, u_wire_color, cover);
  }
  frag_color = vec4(color, 1.0);
}
)";

constexpr const char* kLineVertex = R"(#version 330 core
layout(location = 0) in vec3 a_position;
layout(location = 1) in vec4 a_color;
uniform mat4 u_view_projection;
out vec4 v_color;
void main() {
  v_color = a_color;
  gl_Position = u_view_projection * vec4(a_position, 1.0);
}
)";

constexpr const char* kLineFragment = R"(#version 330 core
in vec4 v_color;
out vec4 frag_color;
void main() { frag_color = v_color; }
)";

std::string shader_log(GLuint shader) {
  GLint length = 0;
  glGetShaderiv(shader, GL_INFO_LOG_LENGTH, &length);
  std::string log(static_cast<size_t>(std::max(length, 1)), '\0');
  glGetShaderInfoLog(shader, length, nullptr, log.data());
  return log.c_str();
}

Expected<GLuint> compile_shader(GLenum type, const char* source, const char* name) {
  const GLuint shader = glCreateShader(type);
  if (shader == 0)
    return internal_error(std::string("renderer: glCreateShader failed for ") + name);
  glShaderSource(shader, 1, &source, nullptr);
  glCompileShader(shader);
  GLint ok = GL_FALSE;
  glGetShaderiv(shader, GL_COMPILE_STATUS, &ok);
  if (ok != GL_TRUE) {
    const std::string log = shader_log(shader);
    glDeleteShader(shader);
    return internal_error(std::string("renderer: shader '") + name + "' does not compile: " + log);
  }
  return shader;
}

// Links the given stages into a program; the shader objects are deleted either way.
Expected<GLuint> link_program(const std::vector<GLuint>& shaders, const char* name) {
  const GLuint program = glCreateProgram();
  for (GLuint s : shaders) glAttachShader(program, s);
  glLinkProgram(program);
  for (GLuint s : shaders) {
    glDetachShader(program, s);
    glDeleteShader(s);
  }
  GLint ok = GL_FALSE;
  glGetProgramiv(program, GL_LINK_STATUS, &ok);
  if (ok != GL_TRUE) {
    GLint length = 0;
    glGetProgramiv(program, GL_INFO_LOG_LENGTH, &length);
    std::string log(static_cast<size_t>(std::max(length, 1)), '\0');
    glGetProgramInfoLog(program, length, nullptr, log.data());
    glDeleteProgram(program);
    return internal_error(std::string("renderer: program '") + name +
                          "' does not link: " + log.c_str());
  }
  return program;
}

Expected<GLuint> build_program(const char* vertex, const char* geometry, const char* fragment,
                               const char* name) {
  std::vector<GLuint> shaders;
  auto cleanup = [&] {
    for (GLuint s : shaders) glDeleteShader(s);
  };
  const std::pair<GLenum, const char*> stages[] = {
      {GL_VERTEX_SHADER, vertex}, {GL_GEOMETRY_SHADER, geometry}, {GL_FRAGMENT_SHADER, fragment}};
  for (const auto& [type, source] : stages) {
    if (source == nullptr) continue;
    auto shader = compile_shader(type, source, name);
    if (!shader.ok()) {
      cleanup();
      return shader.status();
    }
    shaders.push_back(*shader);
  }
  return link_program(shaders, name);
}

// Area-weighted vertex normals (the cross product's length is twice the triangle area, so summing
// unnormalised face normals weights by area). Vertices in no triangle get +Y.
std::vector<float> vertex_normals(const mesh::Mesh& mesh) {
  std::vector<float> normals(mesh.positions.size(), 0.0f);
  const float* p = mesh.positions.data();
  for (size_t t = 0; t + 2 < mesh.triangles.size(); t += 3) {
    const uint32_t a = mesh.triangles[t], b = mesh.triangles[t + 1], c = mesh.triangles[t + 2];
    const Vec3 pa{p[3 * a], p[3 * a + 1], p[3 * a + 2]};
    const Vec3 pb{p[3 * b], p[3 * b + 1], p[3 * b + 2]};
    const Vec3 pc{p[3 * c], p[3 * c + 1], p[3 * c + 2]};
    const Vec3 n = cross(pb - pa, pc - pa);
    for (uint32_t v : {a, b, c}) {
      normals[3 * v] += n.x;
      normals[3 * v + 1] += n.y;
      normals[3 * v + 2] += n.z;
    }
  }
  for (size_t v = 0; v < normals.size(); v += 3) {
    Vec3 n = normalize(Vec3{normals[v], normals[v + 1], normals[v + 2]});
    if (length(n) == 0) n = Vec3{0, 1, 0};
    normals[v] = n.x;
    normals[v + 1] = n.y;
    normals[v + 2] = n.z;
  }
  return normals;
}

// Grid spacing: a 1-2-5 step near a fifth of the radius, so the grid has ~10 cells across.
float nice_step(float target) {
  const float exponent = std::floor(std::log10(target));
  const float base = std::pow(10.0f, exponent);
  const float m = target / base;
  return base * (m < 1.5f ? 1.0f : m < 3.5f ? 2.0f : m < 7.5f ? 5.0f : 10.0f);
}

// Saves the GL state draw()/set_mesh() touch and puts it back on destruction.
class GlStateGuard {
 public:
  GlStateGuard() {
    glGetIntegerv(GL_CURRENT_PROGRAM, &program_);
    glGetIntegerv(GL_VERTEX_ARRAY_BINDING, &vao_);
    glGetIntegerv(GL_ARRAY_BUFFER_BINDING, &array_buffer_);
    glGetIntegerv(GL_ACTIVE_TEXTURE, &active_texture_);
    glActiveTexture(GL_TEXTURE0);
    glGetIntegerv(GL_TEXTURE_BINDING_2D, &texture_2d_);
    glGetIntegerv(GL_UNPACK_ALIGNMENT, &unpack_alignment_);
    glGetIntegerv(GL_VIEWPORT, viewport_);
    depth_test_ = glIsEnabled(GL_DEPTH_TEST);
    blend_ = glIsEnabled(GL_BLEND);
    cull_face_ = glIsEnabled(GL_CULL_FACE);
    scissor_test_ = glIsEnabled(GL_SCISSOR_TEST);
    polygon_offset_fill_ = glIsEnabled(GL_POLYGON_OFFSET_FILL);
    glGetIntegerv(GL_DEPTH_FUNC, &depth_func_);
    glGetBooleanv(GL_DEPTH_WRITEMASK, &depth_mask_);
    glGetBooleanv(GL_COLOR_WRITEMASK, color_mask_);
    glGetIntegerv(GL_BLEND_SRC_RGB, &blend_src_rgb_);
    glGetIntegerv(GL_BLEND_DST_RGB, &blend_dst_rgb_);
    glGetIntegerv(GL_BLEND_SRC_ALPHA, &blend_src_alpha_);
    glGetIntegerv(GL_BLEND_DST_ALPHA, &blend_dst_alpha_);
    glGetIntegerv(GL_BLEND_EQUATION_RGB, &blend_eq_rgb_);
    glGetIntegerv(GL_BLEND_EQUATION_ALPHA, &blend_eq_alpha_);
    glGetFloatv(GL_COLOR_CLEAR_VALUE, clear_color_);
    glGetFloatv(GL_DEPTH_CLEAR_VALUE, &clear_depth_);
  }
  ~GlStateGuard() {
    glUseProgram(static_cast<GLuint>(program_));
    glBindVertexArray(static_cast<GLuint>(vao_));
    glBindBuffer(GL_ARRAY_BUFFER, static_cast<GLuint>(array_buffer_));
    glActiveTexture(GL_TEXTURE0);
    glBindTexture(GL_TEXTURE_2D, static_cast<GLuint>(texture_2d_));
    glActiveTexture(static_cast<GLenum>(active_texture_));
    glPixelStorei(GL_UNPACK_ALIGNMENT, unpack_alignment_);
    glViewport(viewport_[0], viewport_[1], viewport_[2], viewport_[3]);
    set(GL_DEPTH_TEST, depth_test_);
    set(GL_BLEND, blend_);
    set(GL_CULL_FACE, cull_face_);
    set(GL_SCISSOR_TEST, scissor_test_);
    set(GL_POLYGON_OFFSET_FILL, polygon_offset_fill_);
    glDepthFunc(static_cast<GLenum>(depth_func_));
    glDepthMask(depth_mask_);
    glColorMask(color_mask_[0], color_mask_[1], color_mask_[2], color_mask_[3]);
    glBlendFuncSeparate(static_cast<GLenum>(blend_src_rgb_), static_cast<GLenum>(blend_dst_rgb_),
                        static_cast<GLenum>(blend_src_alpha_),
                        static_cast<GLenum>(blend_dst_alpha_));
    glBlendEquationSeparate(static_cast<GLenum>(blend_eq_rgb_),
                            static_cast<GLenum>(blend_eq_alpha_));
    glClearColor(clear_color_[0], clear_color_[1], clear_color_[2], clear_color_[3]);
    glClearDepth(clear_depth_);
  }
  GlStateGuard(const GlStateGuard&) = delete;
  GlStateGuard& operator=(const GlStateGuard&) = delete;

 private:
  static void set(GLenum cap, GLboolean on) {
    if (on) {
      glEnable(cap);
    } else {
      glDisable(cap);
    }
  }
  GLint program_ = 0, vao_ = 0, array_buffer_ = 0;
  GLint active_texture_ = GL_TEXTURE0, texture_2d_ = 0, unpack_alignment_ = 4;
  GLint viewport_[4] = {0, 0, 0, 0};
  GLboolean depth_test_ = GL_FALSE, blend_ = GL_FALSE, cull_face_ = GL_FALSE;
  GLboolean scissor_test_ = GL_FALSE, polygon_offset_fill_ = GL_FALSE;
  GLint depth_func_ = GL_LESS;
  GLboolean depth_mask_ = GL_TRUE;
  GLboolean color_mask_[4] = {GL_TRUE, GL_TRUE, GL_TRUE, GL_TRUE};
  GLint blend_src_rgb_ = GL_ONE, blend_dst_rgb_ = GL_ZERO, blend_src_alpha_ = GL_ONE,
        blend_dst_alpha_ = GL_ZERO;
  GLint blend_eq_rgb_ = GL_FUNC_ADD, blend_eq_alpha_ = GL_FUNC_ADD;
  GLfloat clear_color_[4] = {0, 0, 0, 0};
  GLfloat clear_depth_ = 1.0f;
};

// Debug builds report GL errors raised inside the renderer (house style: debug-only GL checks).
void debug_check_gl(const char* where) {
#ifndef NDEBUG
  for (GLenum e = glGetError(); e != GL_NO_ERROR; e = glGetError()) {
    std::fprintf(stderr, "tessera renderer: GL error 0x%04x in %s\n", e, where);
  }
#else
  (void)where;
#endif
}

struct LineVertex {
  float position[3];
  float color[4];
};

void add_line(std::vector<LineVertex>& out, const Vec3& a, const Vec3& b,
              const std::array<float, 4>& color) {
  out.push_back({{a.x, a.y, a.z}, {color[0], color[1], color[2], color[3]}});
  out.push_back({{b.x, b.y, b.z}, {color[0], color[1], color[2], color[3]}});
}

}  // namespace

const char* shading_mode_name(ShadingMode mode) {
  switch (mode) {
    case ShadingMode::kLit:
      return "lit";
    case ShadingMode::kNormals:
      return "normals";
    case ShadingMode::kMatcap:
      return "matcap";
    case ShadingMode::kTextured:
      return "textured";
    case ShadingMode::kDepth:
      return "depth";
  }
  return "lit";
}

Expected<ShadingMode> parse_shading_mode(const char* name) {
  const std::string s = name != nullptr ? name : "";
  for (ShadingMode m : {ShadingMode::kLit, ShadingMode::kNormals, ShadingMode::kMatcap,
                        ShadingMode::kTextured, ShadingMode::kDepth}) {
    if (s == shading_mode_name(m)) return m;
  }
  return invalid_argument("shading mode '" + s +
                          "' is not one of lit, normals, matcap, textured, depth");
}

Expected<std::unique_ptr<MeshRenderer>> MeshRenderer::create() {
  std::unique_ptr<MeshRenderer> renderer(new MeshRenderer());
  TESSERA_RETURN_IF_ERROR(renderer->init());
  return renderer;
}

Status MeshRenderer::init() {
  // GL_MAJOR_VERSION only exists from GL 3.0; an older context leaves the zeros and an error.
  GLint major = 0, minor = 0;
  glGetIntegerv(GL_MAJOR_VERSION, &major);
  glGetIntegerv(GL_MINOR_VERSION, &minor);
  while (glGetError() != GL_NO_ERROR) {
  }
  if (major * 10 + minor < 33) {
    const GLubyte* version = glGetString(GL_VERSION);
    return unsupported(
        std::string("renderer: needs an OpenGL 3.3 core context, the current one is ") +
        (version != nullptr ? reinterpret_cast<const char*>(version) : "none"));
  }
  TESSERA_ASSIGN_OR_RETURN(surface_program_, build_program(kSurfaceVertex, kSurfaceGeometry,
                                                           kSurfaceFragment, "surface"));
  TESSERA_ASSIGN_OR_RETURN(line_program_,
                           build_program(kLineVertex, nullptr, kLineFragment, "lines"));

  GLint previous_vao = 0, previous_buffer = 0;
  glGetIntegerv(GL_VERTEX_ARRAY_BINDING, &previous_vao);
  glGetIntegerv(GL_ARRAY_BUFFER_BINDING, &previous_buffer);
  GLuint names[3];
  glGenVertexArrays(1, names);
  mesh_vao_ = names[0];
  glGenBuffers(2, names);
  mesh_vbo_ = names[0];
  mesh_ebo_ = names[1];
  glBindVertexArray(mesh_vao_);
  glBindBuffer(GL_ARRAY_BUFFER, mesh_vbo_);
  glBindBuffer(GL_ELEMENT_ARRAY_BUFFER, mesh_ebo_);
  // Interleaved position (3), normal (3), uv (2) floats per vertex.
  glEnableVertexAttribArray(0);
  glVertexAttribPointer(0, 3, GL_FLOAT, GL_FALSE, 8 * sizeof(float), nullptr);
  glEnableVertexAttribArray(1);
  glVertexAttribPointer(1, 3, GL_FLOAT, GL_FALSE, 8 * sizeof(float),
                        reinterpret_cast<const void*>(3 * sizeof(float)));
  glEnableVertexAttribArray(2);
  glVertexAttribPointer(2, 2, GL_FLOAT, GL_FALSE, 8 * sizeof(float),
                        reinterpret_cast<const void*>(6 * sizeof(float)));

  glGenVertexArrays(1, names);
  line_vao_ = names[0];
  glGenBuffers(1, names);
  line_vbo_ = names[0];
  glBindVertexArray(line_vao_);
  glBindBuffer(GL_ARRAY_BUFFER, line_vbo_);
  glEnableVertexAttribArray(0);
  glVertexAttribPointer(0, 3, GL_FLOAT, GL_FALSE, sizeof(LineVertex), nullptr);
  glEnableVertexAttribArray(1);
  glVertexAttribPointer(1, 4, GL_FLOAT, GL_FALSE, sizeof(LineVertex),
                        reinterpret_cast<const void*>(offsetof(LineVertex, color)));
  glBindVertexArray(static_cast<GLuint>(previous_vao));
  glBindBuffer(GL_ARRAY_BUFFER, static_cast<GLuint>(previous_buffer));
  debug_check_gl("MeshRenderer::create");
  return Status();
}

MeshRenderer::~MeshRenderer() {
  if (surface_program_ != 0) glDeleteProgram(surface_program_);
  if (line_program_ != 0) glDeleteProgram(line_program_);
  const GLuint buffers[3] = {mesh_vbo_, mesh_ebo_, line_vbo_};
  glDeleteBuffers(3, buffers);  // zeros are ignored
  const GLuint arrays[2] = {mesh_vao_, line_vao_};
  glDeleteVertexArrays(2, arrays);
  if (texture_ != 0) {
    const GLuint texture = texture_;
    glDeleteTextures(1, &texture);
  }
}

Status MeshRenderer::set_mesh(const mesh::Mesh& mesh) {
  TESSERA_RETURN_IF_ERROR(mesh::validate(mesh).with_context("renderer: set_mesh"));
  if (mesh.empty()) {
    clear_mesh();
    return Status();
  }
  std::vector<float> computed;
  const std::vector<float>& normals =
      mesh.normals.empty() ? (computed = vertex_normals(mesh)) : mesh.normals;
  const size_t vertices = static_cast<size_t>(mesh.vertex_count());
  const bool has_uvs = !mesh.uvs.empty();
  std::vector<float> interleaved(vertices * 8, 0.0f);  // uvs stay (0, 0) without mesh uvs
  for (size_t v = 0; v < vertices; ++v) {
    std::memcpy(&interleaved[8 * v], &mesh.positions[3 * v], 3 * sizeof(float));
    std::memcpy(&interleaved[8 * v + 3], &normals[3 * v], 3 * sizeof(float));
    if (has_uvs) std::memcpy(&interleaved[8 * v + 6], &mesh.uvs[2 * v], 2 * sizeof(float));
  }
  const auto vbo_bytes = static_cast<int64_t>(interleaved.size() * sizeof(float));
  const auto ebo_bytes = static_cast<int64_t>(mesh.triangles.size() * sizeof(uint32_t));

  GLint previous_vao = 0, previous_buffer = 0;
  glGetIntegerv(GL_VERTEX_ARRAY_BINDING, &previous_vao);
  glGetIntegerv(GL_ARRAY_BUFFER_BINDING, &previous_buffer);
  glBindVertexArray(mesh_vao_);
  glBindBuffer(GL_ARRAY_BUFFER, mesh_vbo_);
  // Reallocate only when growing (by 1.5x to absorb a stream of slightly larger partial meshes);
  // otherwise overwrite in place.
  if (vbo_bytes > mesh_vbo_bytes_) {
    mesh_vbo_bytes_ = vbo_bytes + vbo_bytes / 2;
    glBufferData(GL_ARRAY_BUFFER, mesh_vbo_bytes_, nullptr, GL_DYNAMIC_DRAW);
  }
  glBufferSubData(GL_ARRAY_BUFFER, 0, vbo_bytes, interleaved.data());
  if (ebo_bytes > mesh_ebo_bytes_) {
    mesh_ebo_bytes_ = ebo_bytes + ebo_bytes / 2;
    glBufferData(GL_ELEMENT_ARRAY_BUFFER, mesh_ebo_bytes_, nullptr, GL_DYNAMIC_DRAW);
  }
  glBufferSubData(GL_ELEMENT_ARRAY_BUFFER, 0, ebo_bytes, mesh.triangles.data());
  glBindVertexArray(static_cast<GLuint>(previous_vao));
  glBindBuffer(GL_ARRAY_BUFFER, static_cast<GLuint>(previous_buffer));
  upload_texture(mesh.texture, has_uvs);
  debug_check_gl("MeshRenderer::set_mesh");

  vertex_count_ = mesh.vertex_count();
  index_count_ = static_cast<int64_t>(mesh.triangles.size());
  bounds_ = mesh::compute_bounds(mesh);
  return Status();
}

void MeshRenderer::upload_texture(const mesh::TextureImage& image, bool has_uvs) {
  has_texture_ = has_uvs && !image.empty();
  if (!has_texture_) return;
  GLint previous_active = GL_TEXTURE0, previous_texture = 0, previous_alignment = 4;
  glGetIntegerv(GL_ACTIVE_TEXTURE, &previous_active);
  glActiveTexture(GL_TEXTURE0);
  glGetIntegerv(GL_TEXTURE_BINDING_2D, &previous_texture);
  glGetIntegerv(GL_UNPACK_ALIGNMENT, &previous_alignment);
  if (texture_ == 0) {
    GLuint name = 0;
    glGenTextures(1, &name);
    texture_ = name;
  }
  glBindTexture(GL_TEXTURE_2D, texture_);
  glPixelStorei(GL_UNPACK_ALIGNMENT, 1);  // RGB8 rows of odd widths are not 4-byte aligned
  glTexImage2D(GL_TEXTURE_2D, 0, GL_RGB8, static_cast<GLsizei>(image.width),
               static_cast<GLsizei>(image.height), 0, GL_RGB, GL_UNSIGNED_BYTE, image.rgb.data());
  // Mip-mapped: a small concept-image atlas on a mesh seen from afar must not shimmer; the atlas
  // regions carry gutters (engine/mesh/texture.h) so the lower levels do not bleed across them.
  glGenerateMipmap(GL_TEXTURE_2D);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_LINEAR_MIPMAP_LINEAR);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_LINEAR);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
  glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
  glPixelStorei(GL_UNPACK_ALIGNMENT, previous_alignment);
  glBindTexture(GL_TEXTURE_2D, static_cast<GLuint>(previous_texture));
  glActiveTexture(static_cast<GLenum>(previous_active));
}

void MeshRenderer::clear_mesh() {
  vertex_count_ = 0;
  index_count_ = 0;
  has_texture_ = false;
  bounds_ = Bounds{};
}

void MeshRenderer::draw(const OrbitCamera& camera, const RenderOptions& options, int width,
                        int height) {
  width = std::max(width, 1);
  height = std::max(height, 1);
  GlStateGuard guard;
  glViewport(0, 0, width, height);
  glDisable(GL_SCISSOR_TEST);
  glDisable(GL_CULL_FACE);
  glDisable(GL_POLYGON_OFFSET_FILL);
  glColorMask(GL_TRUE, GL_TRUE, GL_TRUE, GL_TRUE);
  glDepthMask(GL_TRUE);
  if (options.clear) {
    glClearColor(options.background[0], options.background[1], options.background[2],
                 options.background[3]);
    glClearDepth(1.0);
    glClear(GL_COLOR_BUFFER_BIT | GL_DEPTH_BUFFER_BIT);
  }
  glEnable(GL_DEPTH_TEST);
  glDepthFunc(GL_LESS);
  glDisable(GL_BLEND);

  const float aspect = static_cast<float>(width) / static_cast<float>(height);
  const Mat4 view = camera.view();
  const Mat4 projection = camera.projection(aspect);

  if (index_count_ > 0) {
    glUseProgram(surface_program_);
    glUniformMatrix4fv(glGetUniformLocation(surface_program_, "u_view"), 1, GL_FALSE, view.data());
    glUniformMatrix4fv(glGetUniformLocation(surface_program_, "u_projection"), 1, GL_FALSE,
                       projection.data());
    // NDC [-1, 1] to pixels: half the viewport size.
    glUniform2f(glGetUniformLocation(surface_program_, "u_viewport"), 0.5f * width, 0.5f * height);
    glUniform1i(glGetUniformLocation(surface_program_, "u_mode"),
                options.shading == ShadingMode::kNormals    ? 1
                : options.shading == ShadingMode::kMatcap   ? 2
                : options.shading == ShadingMode::kTextured ? 3
                : options.shading == ShadingMode::kDepth    ? 4
                                                            : 0);
    {
      // A lower bound of the nearest visible depth: the eye's distance to the bounding sphere.
      const Vec3 eye = camera.eye();
      const float to_centre = length(eye - bounds_center(bounds_));
      const float near = std::max(to_centre - bounds_radius(bounds_), 1e-4f * to_centre + 1e-6f);
      glUniform1f(glGetUniformLocation(surface_program_, "u_depth_near"), near);
    }
    glUniform1i(glGetUniformLocation(surface_program_, "u_has_texture"), has_texture_ ? 1 : 0);
    glUniform1i(glGetUniformLocation(surface_program_, "u_texture"), 0);
    glActiveTexture(GL_TEXTURE0);
    glBindTexture(GL_TEXTURE_2D, has_texture_ ? texture_ : 0);
    glUniform3f(glGetUniformLocation(surface_program_, "u_base_color"), options.base_color[0],
                options.base_color[1], options.base_color[2]);
    glUniform1i(glGetUniformLocation(surface_program_, "u_wireframe"),
                options.wireframe && options.shading != ShadingMode::kDepth ? 1 : 0);
    glUniform3f(glGetUniformLocation(surface_program_, "u_wire_color"), options.wire_color[0],
                options.wire_color[1], options.wire_color[2]);
    glUniform1f(glGetUniformLocation(surface_program_, "u_wire_width"),
                std::max(options.wire_width_pixels, 0.25f));
    glBindVertexArray(mesh_vao_);
    glDrawElements(GL_TRIANGLES, static_cast<GLsizei>(index_count_), GL_UNSIGNED_INT, nullptr);
  }

  if (options.grid || options.axes) {
    std::vector<LineVertex> lines;
    const bool have_mesh = index_count_ > 0;
    const Vec3 center = have_mesh ? bounds_center(bounds_) : Vec3{0, 0, 0};
    float radius = have_mesh ? bounds_radius(bounds_) : 1.0f;
    if (!(radius > 0)) radius = 1.0f;
    if (options.grid) {
      const float step = nice_step(radius / 5.0f);
      const int half_cells = static_cast<int>(std::ceil(1.6f * radius / step));
      const float y = have_mesh ? bounds_.min[1] : 0.0f;
      // Snap the grid to multiples of the step so it does not swim as partial meshes change size.
      const float cx = std::round(center.x / step) * step;
      const float cz = std::round(center.z / step) * step;
      const float extent = static_cast<float>(half_cells) * step;
      for (int i = -half_cells; i <= half_cells; ++i) {
        const float o = static_cast<float>(i) * step;
        const float a = (i == 0) ? 0.55f : 0.30f;
        const std::array<float, 4> color{0.55f, 0.57f, 0.60f, a};
        add_line(lines, {cx + o, y, cz - extent}, {cx + o, y, cz + extent}, color);
        add_line(lines, {cx - extent, y, cz + o}, {cx + extent, y, cz + o}, color);
      }
    }
    if (options.axes) {
      const float len = 0.6f * radius;
      add_line(lines, {0, 0, 0}, {len, 0, 0}, {0.90f, 0.25f, 0.25f, 1.0f});
      add_line(lines, {0, 0, 0}, {0, len, 0}, {0.30f, 0.85f, 0.30f, 1.0f});
      add_line(lines, {0, 0, 0}, {0, 0, len}, {0.30f, 0.45f, 0.95f, 1.0f});
    }
    const auto bytes = static_cast<int64_t>(lines.size() * sizeof(LineVertex));
    glBindVertexArray(line_vao_);
    glBindBuffer(GL_ARRAY_BUFFER, line_vbo_);
    if (bytes > line_vbo_bytes_) {
      line_vbo_bytes_ = bytes;
      glBufferData(GL_ARRAY_BUFFER, bytes, nullptr, GL_DYNAMIC_DRAW);
    }
    glBufferSubData(GL_ARRAY_BUFFER, 0, bytes, lines.data());
    glUseProgram(line_program_);
    const Mat4 view_projection = projection * view;
    glUniformMatrix4fv(glGetUniformLocation(line_program_, "u_view_projection"), 1, GL_FALSE,
                       view_projection.data());
    glEnable(GL_BLEND);
    glBlendFuncSeparate(GL_SRC_ALPHA, GL_ONE_MINUS_SRC_ALPHA, GL_ONE, GL_ONE_MINUS_SRC_ALPHA);
    glBlendEquationSeparate(GL_FUNC_ADD, GL_FUNC_ADD);
    // Lines are tested against the mesh's depth (the mesh hides the grid behind it) but do not
    // write depth, so overlapping translucent grid lines do not punch holes in each other.
    glDepthMask(GL_FALSE);
    glDrawArrays(GL_LINES, 0, static_cast<GLsizei>(lines.size()));
  }
  debug_check_gl("MeshRenderer::draw");
}

}  // namespace tessera::render
