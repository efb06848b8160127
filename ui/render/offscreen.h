// OffscreenContext: a headless OpenGL 3.3+ core context (EGL on EGL_PLATFORM_SURFACELESS_MESA, no
// X server or window needed) plus a framebuffer object to draw into and read back. Used by
// `tessera render`, the studio's thumbnails and the renderer tests.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "ui/render/image.h"

namespace tessera::render {

class OffscreenContext {
 public:
  // Opens the surfaceless EGL display, creates a GL 3.3 core context, makes it current on the
  // calling thread and creates a `width` x `height` FBO (RGBA8 colour, 24-bit depth, 4x MSAA
  // resolved on read when available) bound as the draw framebuffer. kUnsupported with EGL's reason
  // when no such display/context can be made (tests skip on it); kInvalidArgument for sizes outside
  // [1, 16384].
  static Expected<std::unique_ptr<OffscreenContext>> create(int width, int height);
  // Destroys the FBO and the context (making it current first).
  ~OffscreenContext();
  OffscreenContext(const OffscreenContext&) = delete;
  OffscreenContext& operator=(const OffscreenContext&) = delete;

  // Makes the context current on the calling thread and binds the FBO. A context is current on
  // one thread at a time.
  Status make_current();
  // Reallocates the FBO at a new size (contents undefined) and binds it.
  Status resize(int width, int height);
  // Binds the FBO as GL_FRAMEBUFFER (draw() of the renderer then renders into it).
  void bind_framebuffer();
  // Waits for rendering, resolves multisampling and returns the pixels top row first.
  Expected<Image> read_pixels();

  int width() const { return width_; }
  int height() const { return height_; }
  // GL_RENDERER and GL_VERSION strings, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)", "4.5 (Core ...)".
  const std::string& gl_renderer() const { return gl_renderer_; }
  const std::string& gl_version() const { return gl_version_; }

 private:
  OffscreenContext() = default;
  Status create_framebuffers();
  void destroy_framebuffers();

  void* display_ = nullptr;  // EGLDisplay
  void* context_ = nullptr;  // EGLContext
  int width_ = 0, height_ = 0;
  int samples_ = 0;
  uint32_t msaa_fbo_ = 0, msaa_color_ = 0, msaa_depth_ = 0;  // drawn into (samples_ > 0)
  uint32_t fbo_ = 0, color_ = 0, depth_ = 0;                 // resolved / single-sample
  std::string gl_renderer_, gl_version_;
};

}  // namespace tessera::render
