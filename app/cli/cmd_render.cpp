// `tessera render <mesh.obj|.glb|.gltf|.fbx> --turntable out.gif|out.png [--frames N] [--size WxH]
//  [--shading lit|normals|matcap|textured] [--wireframe] [--no-grid] [--delay CS]`: a headless
//  preview.
//
// Renders the mesh in an EGL surfaceless context (no X server, no window) with the same renderer as
// the studio and the viewer, the camera framed to fit and spun once around the vertical axis:
// N frames into a looping GIF, or into a PNG (one frame; a contact sheet when --frames > 1).
// A binary built without the renderer (TESSERA_WITH_GUI=OFF) says so and exits 1.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/cli/commands.h"

#ifdef TESSERA_HAVE_RENDER
#include <algorithm>
#include <cctype>
#include <filesystem>

#include "engine/mesh/import.h"
#include "engine/mesh/metadata.h"
#include "ui/render/camera.h"
#include "ui/render/depth.h"
#include "ui/render/image.h"
#include "ui/render/offscreen.h"
#include "ui/render/renderer.h"
#endif

namespace tessera::cli {

namespace {

struct RenderArgs {
  std::string mesh_path;
  std::string out_path;
  int frames = 0;  // 0: 36 for a GIF, 1 for a PNG
  std::string size = "256x256";
  std::string shading = "lit";
  bool wireframe = false;
  bool no_grid = false;
  int delay_cs = 8;
  float pitch_degrees = 25.0f;
};

#ifdef TESSERA_HAVE_RENDER

// "640x480" -> (640, 480); both in [1, 4096].
Status parse_size(const std::string& text, int* width, int* height) {
  const auto x = text.find_first_of("xX");
  auto bad = [&] {
    return invalid_argument("--size '" + text +
                            "' is not WxH with 1 <= W, H <= 4096 (e.g. 320x240)");
  };
  if (x == std::string::npos || x == 0 || x + 1 >= text.size()) return bad();
  for (size_t i = 0; i < text.size(); ++i) {
    if (i != x && !std::isdigit(static_cast<unsigned char>(text[i]))) return bad();
  }
  if (x > 5 || text.size() - x - 1 > 5) return bad();
  *width = std::stoi(text.substr(0, x));
  *height = std::stoi(text.substr(x + 1));
  if (*width < 1 || *height < 1 || *width > 4096 || *height > 4096) return bad();
  return Status();
}

// Usage problems (exit 2) are kInvalidArgument from argument checks; everything after is exit 1.
int run_render(const RenderArgs& args) {
  namespace fs = std::filesystem;
  auto usage_error = [](const Status& st) {
    std::fprintf(stderr, "tessera render: %s\n", st.message().c_str());
    return 2;
  };
  auto runtime_error = [](const Status& st) {
    std::fprintf(stderr, "tessera render: %s\n", st.message().c_str());
    return 1;
  };
  int width = 0, height = 0;
  if (Status st = parse_size(args.size, &width, &height); !st.ok()) return usage_error(st);
  auto shading = render::parse_shading_mode(args.shading.c_str());
  if (!shading.ok()) return usage_error(shading.status());
  std::string ext = fs::path(args.out_path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext != ".gif" && ext != ".png") {
    return usage_error(invalid_argument("--turntable '" + args.out_path +
                                        "': the output must end in .gif or .png"));
  }
  const int frames = args.frames > 0 ? args.frames : (ext == ".gif" ? 36 : 1);
  if (frames > 720)
    return usage_error(invalid_argument("--frames " + std::to_string(frames) + " > 720"));
  if (args.delay_cs < 1 || args.delay_cs > 65535) {
    return usage_error(invalid_argument("--delay " + std::to_string(args.delay_cs) +
                                        " is outside [1, 65535] centiseconds"));
  }

  // Texture problems (a missing PNG beside an OBJ, ...) still show the geometry: say why the
  // texture is absent rather than fail.
  std::vector<std::string> warnings;
  auto mesh = tessera::mesh::import_mesh_file(args.mesh_path, &warnings);
  if (!mesh.ok()) return runtime_error(mesh.status());
  for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  auto context = render::OffscreenContext::create(width, height);
  if (!context.ok()) {
    return runtime_error(context.status().with_context(
        "cannot create a headless GL 3.3 context (EGL surfaceless; Mesa's libEGL provides it)"));
  }
  auto renderer = render::MeshRenderer::create();
  if (!renderer.ok()) return runtime_error(renderer.status());
  if (Status st = (*renderer)->set_mesh(*mesh); !st.ok())
    return runtime_error(st.with_context(args.mesh_path));

  render::RenderOptions options;
  options.shading = *shading;
  options.wireframe = args.wireframe;
  options.grid = !args.no_grid;
  options.axes = false;  // previews show the asset, not the world origin
  if (*shading == render::ShadingMode::kDepth) {
    options.grid = false;  // a depth map shows the object alone, on black
    options.background = {0.0f, 0.0f, 0.0f, 1.0f};
  }
  render::OrbitCamera camera;
  camera.pitch = args.pitch_degrees * 3.14159265f / 180.0f;
  camera.yaw = 0.6f;
  camera.viewport_height = height;
  camera.frame_to_fit((*renderer)->bounds(),
                      static_cast<float>(width) / static_cast<float>(height));
  const float start_yaw = camera.yaw;

  std::vector<render::Image> images;
  images.reserve(static_cast<size_t>(frames));
  for (int i = 0; i < frames; ++i) {
    camera.yaw = start_yaw;
    camera.turntable(2.0f * 3.14159265f * static_cast<float>(i) / static_cast<float>(frames));
    (*renderer)->draw(camera, options, width, height);
    auto image = (*context)->read_pixels();
    if (!image.ok()) return runtime_error(image.status());
    if (*shading == render::ShadingMode::kDepth) {
      // The ControlNet depth map (ui/render/depth.h), grey as RGBA.
      const mesh::TextureImage depth = render::depth_map_from_frame(*image);
      for (size_t p = 0; p < depth.rgb.size() / 3; ++p) {
        for (int c = 0; c < 3; ++c) image->rgba[p * 4 + c] = depth.rgb[p * 3 + c];
        image->rgba[p * 4 + 3] = 255;
      }
    }
    images.push_back(std::move(image).value());
  }
  renderer->reset();  // GL objects go while the context is current

  // A PNG carries the settings of the mesh it shows (when the mesh file has them).
  std::string settings;
  if (auto metadata = tessera::mesh::read_metadata(args.mesh_path); metadata.ok()) {
    settings = metadata->dump();
  }
  const PngText text = tessera_png_text(settings);
  Status written;
  if (ext == ".gif") {
    written = render::write_gif(args.out_path, images, args.delay_cs);
  } else if (frames == 1) {
    written = render::write_png(args.out_path, images[0], text);
  } else {
    const int columns = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(frames))));
    auto sheet = render::contact_sheet(images, columns);
    if (!sheet.ok()) return runtime_error(sheet.status());
    written = render::write_png(args.out_path, *sheet, text);
  }
  if (!written.ok()) return runtime_error(written);
  std::printf("%s: %d frame%s %dx%d, %lld triangles, %s shading (%s)\n", args.out_path.c_str(),
              frames, frames == 1 ? "" : "s", width, height,
              static_cast<long long>(mesh->triangle_count()), args.shading.c_str(),
              (*context)->gl_renderer().c_str());
  std::fflush(stdout);
  return 0;
}

#else

int run_render(const RenderArgs&) {
  std::fprintf(stderr,
               "tessera render: this tessera was built without the renderer (configure with "
               "-DTESSERA_WITH_GUI=ON and the GL/EGL packages from scripts/setup.sh)\n");
  return 1;
}

#endif

}  // namespace

void register_render(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RenderArgs>();
  CLI::App* cmd = app.add_subcommand(
      "render", "Headless preview of a mesh: a turntable GIF or a PNG (EGL, no display needed)");
  cmd->add_option("mesh", args->mesh_path,
                  "Mesh file (.obj .glb .gltf .fbx .stl .3mf, or any format Assimp reads)")
      ->required();
  cmd->add_option("--turntable", args->out_path, "Output image: .gif (animated) or .png")
      ->required();
  cmd->add_option("--frames", args->frames,
                  "Frames around one full turn (default 36 for .gif, 1 for .png; a .png with more "
                  "frames is a contact sheet)")
      ->check(CLI::Range(1, 720));
  cmd->add_option("--size", args->size, "Frame size WxH in pixels (default 256x256)");
  cmd->add_option(
      "--shading", args->shading,
      "lit, normals, matcap, textured (the mesh's texture; lit when it has none) or depth (the "
      "ControlNet depth map: near white, far dark) (default lit)");
  cmd->add_flag("--wireframe", args->wireframe, "Overlay the triangle edges");
  cmd->add_flag("--no-grid", args->no_grid, "Leave out the ground grid");
  cmd->add_option("--delay", args->delay_cs, "GIF frame delay in 1/100 s (default 8)");
  cmd->add_option("--pitch", args->pitch_degrees, "Camera elevation in degrees (default 25)")
      ->check(CLI::Range(-89.0f, 89.0f));
  cmd->callback([args, exit_code] { *exit_code = run_render(*args); });
}

}  // namespace tessera::cli
