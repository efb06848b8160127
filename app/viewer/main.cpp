// tessera-view: a light mesh viewer (GLFW window, GL 3.3 core, Dear ImGui 1.86 panel) with the same
// MeshRenderer as the studio.
//
//   tessera-view [mesh.obj|.glb|.gltf|.fbx] [--size WxH] [--shading lit|normals|matcap]
//                [--wireframe] [--screenshot out.png] [--quit]
//
// Mouse: left drag orbits, right/middle drag (or shift + left) pans, wheel zooms; F frames the
// mesh; drop an .obj/.glb/.gltf/.fbx on the window to open it. The camera ignores the mouse while
// it is over the ImGui panel (io.WantCaptureMouse). --screenshot saves the window's pixels after
// the first few frames (ImGui needs a frame to lay out); --quit then closes the viewer (tests,
// demos). Exit codes: 0 ok, 1 runtime error (no display, unreadable mesh with --quit), 2 usage.
// GLFW includes the GL headers; glext.h brings the GL 3 entry points (GL_GLEXT_PROTOTYPES is set).
#define GLFW_INCLUDE_GLEXT
#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/mesh/import.h"
#include "ui/render/camera.h"
#include "ui/render/image.h"
#include "ui/render/renderer.h"

namespace {

using tessera::Status;
namespace render = tessera::render;

struct Args {
  std::string mesh_path;
  std::string screenshot_path;
  bool quit = false;
  int width = 1024, height = 720;
  render::ShadingMode shading = render::ShadingMode::kLit;
  bool wireframe = false;
};

void print_usage() {
  std::fputs(
      "usage: tessera-view [mesh.obj|mesh.glb] [--size WxH] [--shading lit|normals|matcap]\n"
      "                    [--wireframe] [--screenshot out.png] [--quit]\n",
      stderr);
}

// Returns false (after printing why) on a usage error.
bool parse_args(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tessera-view: %s needs a value\n", name);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "--screenshot") {
      const char* v = value("--screenshot");
      if (v == nullptr) return false;
      args->screenshot_path = v;
    } else if (a == "--quit") {
      args->quit = true;
    } else if (a == "--wireframe") {
      args->wireframe = true;
    } else if (a == "--shading") {
      const char* v = value("--shading");
      if (v == nullptr) return false;
      auto mode = render::parse_shading_mode(v);
      if (!mode.ok()) {
        std::fprintf(stderr, "tessera-view: %s\n", mode.status().message().c_str());
        return false;
      }
      args->shading = *mode;
    } else if (a == "--size") {
      const char* v = value("--size");
      if (v == nullptr) return false;
      int w = 0, h = 0;
      char tail = 0;
      if (std::sscanf(v, "%dx%d%c", &w, &h, &tail) != 2 || w < 1 || h < 1 || w > 8192 || h > 8192) {
        std::fprintf(stderr, "tessera-view: --size '%s' is not WxH (e.g. 800x600)\n", v);
        return false;
      }
      args->width = w;
      args->height = h;
    } else if (a == "-h" || a == "--help") {
      print_usage();
      std::exit(0);
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "tessera-view: unknown option '%s'\n", a.c_str());
      return false;
    } else if (args->mesh_path.empty()) {
      args->mesh_path = a;
    } else {
      std::fprintf(stderr, "tessera-view: more than one mesh given ('%s')\n", a.c_str());
      return false;
    }
  }
  if (args->quit && args->screenshot_path.empty()) {
    std::fputs("tessera-view: --quit is for use with --screenshot\n", stderr);
    return false;
  }
  return true;
}

// Everything the GLFW callbacks need; reached through glfwGetWindowUserPointer.
struct Viewer {
  GLFWwindow* window = nullptr;
  std::unique_ptr<render::MeshRenderer> renderer;
  render::OrbitCamera camera;
  render::RenderOptions options;
  std::string mesh_name = "(no mesh: drop an .obj, .glb, .gltf or .fbx here)";
  std::string message;  // the last load error, shown in the panel
  bool turntable = false;
  bool frame_requested = false;

  bool load(const std::string& path) {
    auto mesh = tessera::mesh::import_mesh_file(path);
    Status st = mesh.ok() ? renderer->set_mesh(*mesh) : mesh.status();
    if (!st.ok()) {
      message = st.message();
      std::fprintf(stderr, "tessera-view: %s\n", message.c_str());
      return false;
    }
    mesh_name = std::filesystem::path(path).filename().string();
    message.clear();
    frame_requested = true;
    return true;
  }
};

Viewer* viewer_of(GLFWwindow* window) {
  return static_cast<Viewer*>(glfwGetWindowUserPointer(window));
}

void on_scroll(GLFWwindow* window, double /*dx*/, double dy) {
  if (ImGui::GetCurrentContext() != nullptr && ImGui::GetIO().WantCaptureMouse) return;
  viewer_of(window)->camera.zoom(static_cast<float>(dy));
}

void on_key(GLFWwindow* window, int key, int /*scancode*/, int action, int /*mods*/) {
  if (ImGui::GetCurrentContext() != nullptr && ImGui::GetIO().WantCaptureKeyboard) return;
  if (action != GLFW_PRESS) return;
  if (key == GLFW_KEY_F) viewer_of(window)->frame_requested = true;
  if (key == GLFW_KEY_ESCAPE) glfwSetWindowShouldClose(window, GLFW_TRUE);
}

void on_drop(GLFWwindow* window, int count, const char** paths) {
  // A multi-file drop opens the first one that loads.
  for (int i = 0; i < count; ++i) {
    if (viewer_of(window)->load(paths[i])) break;
  }
}

void draw_panel(Viewer& v) {
  ImGui::SetNextWindowPos(ImVec2(10, 10), ImGuiCond_FirstUseEver);
  ImGui::SetNextWindowSize(ImVec2(270, 0), ImGuiCond_FirstUseEver);
  ImGui::Begin("View");
  ImGui::TextUnformatted(v.mesh_name.c_str());
  if (v.renderer->has_mesh()) {
    ImGui::Text("%lld vertices, %lld triangles", static_cast<long long>(v.renderer->vertex_count()),
                static_cast<long long>(v.renderer->triangle_count()));
  }
  if (!v.message.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.45f, 0.4f, 1.0f));
    ImGui::TextWrapped("%s", v.message.c_str());
    ImGui::PopStyleColor();
  }
  ImGui::Separator();
  int mode = static_cast<int>(v.options.shading);
  ImGui::RadioButton("Lit", &mode, static_cast<int>(render::ShadingMode::kLit));
  ImGui::SameLine();
  ImGui::RadioButton("Normals", &mode, static_cast<int>(render::ShadingMode::kNormals));
  ImGui::SameLine();
  ImGui::RadioButton("Matcap", &mode, static_cast<int>(render::ShadingMode::kMatcap));
  v.options.shading = static_cast<render::ShadingMode>(mode);
  ImGui::Checkbox("Wireframe", &v.options.wireframe);
  ImGui::SameLine();
  ImGui::Checkbox("Grid", &v.options.grid);
  ImGui::SameLine();
  ImGui::Checkbox("Axes", &v.options.axes);
  ImGui::Checkbox("Turntable", &v.turntable);
  ImGui::SameLine();
  if (ImGui::Button("Frame (F)")) v.frame_requested = true;
  ImGui::ColorEdit3("Background", v.options.background.data(), ImGuiColorEditFlags_NoInputs);
  ImGui::TextDisabled("drag orbit, right pan, wheel zoom");
  ImGui::End();
}

Status save_screenshot(const std::string& path, int width, int height) {
  render::Image image;
  image.width = width;
  image.height = height;
  image.rgba.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, image.rgba.data());
  // Bottom-up to top-down; opaque alpha (the window's alpha channel is not meaningful).
  const size_t row = static_cast<size_t>(width) * 4;
  std::vector<uint8_t> flipped(image.rgba.size());
  for (int y = 0; y < height; ++y) {
    std::memcpy(&flipped[static_cast<size_t>(y) * row],
                &image.rgba[static_cast<size_t>(height - 1 - y) * row], row);
  }
  for (size_t i = 3; i < flipped.size(); i += 4) flipped[i] = 255;
  image.rgba = std::move(flipped);
  return render::write_png(path, image);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, &args)) {
    print_usage();
    return 2;
  }
  glfwSetErrorCallback([](int code, const char* text) {
    std::fprintf(stderr, "tessera-view: GLFW error %d: %s\n", code, text);
  });
  if (glfwInit() != GLFW_TRUE) {
    std::fputs(
        "tessera-view: cannot open a window (no display? run under X or xvfb-run, or use "
        "`tessera render` for headless previews)\n",
        stderr);
    return 1;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);
  glfwWindowHint(GLFW_SAMPLES, 4);
  const std::string title =
      "tessera-view" + (args.mesh_path.empty() ? std::string() : " - " + args.mesh_path);
  GLFWwindow* window = glfwCreateWindow(args.width, args.height, title.c_str(), nullptr, nullptr);
  if (window == nullptr) {
    std::fputs("tessera-view: cannot create a GL 3.3 core window\n", stderr);
    glfwTerminate();
    return 1;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);

  int exit_code = 0;
  {
    Viewer v;
    v.window = window;
    auto renderer = render::MeshRenderer::create();
    if (!renderer.ok()) {
      std::fprintf(stderr, "tessera-view: %s\n", renderer.status().to_string().c_str());
      glfwDestroyWindow(window);
      glfwTerminate();
      return 1;
    }
    v.renderer = std::move(renderer).value();
    v.options.shading = args.shading;
    v.options.wireframe = args.wireframe;
    glfwSetWindowUserPointer(window, &v);
    // Our callbacks first; ImGui's backend (install_callbacks = true) chains to them.
    glfwSetScrollCallback(window, on_scroll);
    glfwSetKeyCallback(window, on_key);
    glfwSetDropCallback(window, on_drop);

    IMGUI_CHECKVERSION();
    ImGui::CreateContext();
    ImGui::GetIO().IniFilename = nullptr;  // no imgui.ini litter in the working directory
    ImGui::StyleColorsDark();
    ImGui_ImplGlfw_InitForOpenGL(window, true);
    ImGui_ImplOpenGL3_Init("#version 330 core");

    if (!args.mesh_path.empty() && !v.load(args.mesh_path) && args.quit) exit_code = 1;

    double last_x = 0, last_y = 0;
    glfwGetCursorPos(window, &last_x, &last_y);
    int frame = 0;
    double last_time = glfwGetTime();
    while (!glfwWindowShouldClose(window) && exit_code == 0) {
      glfwPollEvents();
      int fb_width = 0, fb_height = 0;
      glfwGetFramebufferSize(window, &fb_width, &fb_height);
      const double now = glfwGetTime();
      const auto dt = static_cast<float>(now - last_time);
      last_time = now;

      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      ImGui::NewFrame();
      draw_panel(v);

      // Camera from the mouse, unless ImGui owns it this frame.
      double x = 0, y = 0;
      glfwGetCursorPos(window, &x, &y);
      const auto dx = static_cast<float>(x - last_x), dy = static_cast<float>(y - last_y);
      last_x = x;
      last_y = y;
      if (!ImGui::GetIO().WantCaptureMouse) {
        const bool left = glfwGetMouseButton(window, GLFW_MOUSE_BUTTON_LEFT) == GLFW_PRESS;
        const bool right = glfwGetMouseButton(window, GLFW_MOUSE_BUTTON_RIGHT) == GLFW_PRESS ||
                           glfwGetMouseButton(window, GLFW_MOUSE_BUTTON_MIDDLE) == GLFW_PRESS;
        const bool shift = glfwGetKey(window, GLFW_KEY_LEFT_SHIFT) == GLFW_PRESS ||
                           glfwGetKey(window, GLFW_KEY_RIGHT_SHIFT) == GLFW_PRESS;
        int win_width = 1, win_height = 1;
        glfwGetWindowSize(window, &win_width, &win_height);
        v.camera.viewport_height = win_height;
        if (right || (left && shift)) {
          v.camera.pan(dx, dy);
        } else if (left) {
          v.camera.orbit(dx, dy);
        }
      }
      if (v.frame_requested && fb_width > 0 && fb_height > 0) {
        v.camera.frame_to_fit(v.renderer->bounds(),
                              static_cast<float>(fb_width) / static_cast<float>(fb_height));
        v.frame_requested = false;
      }
      if (v.turntable) v.camera.turntable(0.6f * std::min(dt, 0.1f));

      ImGui::Render();
      if (fb_width > 0 && fb_height > 0) {  // minimised windows have a 0x0 framebuffer
        glBindFramebuffer(GL_FRAMEBUFFER, 0);
        v.renderer->draw(v.camera, v.options, fb_width, fb_height);
        ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      }
      // Frame 3: ImGui has laid out its window (its first frame only measures).
      if (!args.screenshot_path.empty() && ++frame == 3) {
        const Status st = save_screenshot(args.screenshot_path, fb_width, fb_height);
        if (!st.ok()) {
          std::fprintf(stderr, "tessera-view: %s\n", st.message().c_str());
          exit_code = 1;
        } else {
          std::printf("%s: %dx%d screenshot\n", args.screenshot_path.c_str(), fb_width, fb_height);
        }
        if (args.quit) glfwSetWindowShouldClose(window, GLFW_TRUE);
      }
      glfwSwapBuffers(window);
    }

    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
    v.renderer.reset();  // while the context is current
  }
  glfwDestroyWindow(window);
  glfwTerminate();
  return exit_code;
}
