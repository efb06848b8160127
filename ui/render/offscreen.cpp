#include "ui/render/offscreen.h"

#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <GL/gl.h>
#include <GL/glext.h>

#include <cstring>

namespace tessera::render {

namespace {

constexpr int kMaxSize = 16384;

std::string egl_error_name(EGLint error) {
  switch (error) {
    case EGL_SUCCESS:
      return "EGL_SUCCESS";
    case EGL_NOT_INITIALIZED:
      return "EGL_NOT_INITIALIZED";
    case EGL_BAD_ACCESS:
      return "EGL_BAD_ACCESS";
    case EGL_BAD_ALLOC:
      return "EGL_BAD_ALLOC";
    case EGL_BAD_ATTRIBUTE:
      return "EGL_BAD_ATTRIBUTE";
    case EGL_BAD_CONFIG:
      return "EGL_BAD_CONFIG";
    case EGL_BAD_CONTEXT:
      return "EGL_BAD_CONTEXT";
    case EGL_BAD_DISPLAY:
      return "EGL_BAD_DISPLAY";
    case EGL_BAD_MATCH:
      return "EGL_BAD_MATCH";
    case EGL_BAD_PARAMETER:
      return "EGL_BAD_PARAMETER";
    default:
      return "EGL error " + std::to_string(error);
  }
}

Status egl_failure(const std::string& what) {
  return unsupported("offscreen GL: " + what + " failed (" + egl_error_name(eglGetError()) + ")");
}

Status check_size(int width, int height) {
  if (width < 1 || height < 1 || width > kMaxSize || height > kMaxSize) {
    return invalid_argument("offscreen GL: size " + std::to_string(width) + "x" +
                            std::to_string(height) + " is outside [1, " + std::to_string(kMaxSize) +
                            "]");
  }
  return Status();
}

}  // namespace

Expected<std::unique_ptr<OffscreenContext>> OffscreenContext::create(int width, int height) {
  TESSERA_RETURN_IF_ERROR(check_size(width, height));
  const char* client_extensions = eglQueryString(EGL_NO_DISPLAY, EGL_EXTENSIONS);
  if (client_extensions == nullptr ||
      std::strstr(client_extensions, "EGL_MESA_platform_surfaceless") == nullptr) {
    return unsupported("offscreen GL: EGL_MESA_platform_surfaceless is not available");
  }
  auto get_platform_display = reinterpret_cast<PFNEGLGETPLATFORMDISPLAYEXTPROC>(
      eglGetProcAddress("eglGetPlatformDisplayEXT"));
  if (get_platform_display == nullptr) {
    return unsupported("offscreen GL: eglGetPlatformDisplayEXT is not available");
  }
  EGLDisplay display =
      get_platform_display(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, nullptr);
  if (display == EGL_NO_DISPLAY) return egl_failure("eglGetPlatformDisplayEXT(surfaceless)");
  EGLint major = 0, minor = 0;
  if (eglInitialize(display, &major, &minor) != EGL_TRUE) return egl_failure("eglInitialize");

  std::unique_ptr<OffscreenContext> self(new OffscreenContext());
  self->display_ = display;
  const EGLint config_attributes[] = {EGL_SURFACE_TYPE, EGL_PBUFFER_BIT, EGL_RENDERABLE_TYPE,
                                      EGL_OPENGL_BIT, EGL_NONE};
  EGLConfig config = nullptr;
  EGLint config_count = 0;
  // Surfaceless contexts need no surface config; take any GL-capable config (or none at all
  // with EGL_KHR_no_config_context, which Mesa has).
  if (eglChooseConfig(display, config_attributes, &config, 1, &config_count) != EGL_TRUE ||
      config_count == 0) {
    config = nullptr;
  }
  if (eglBindAPI(EGL_OPENGL_API) != EGL_TRUE) return egl_failure("eglBindAPI(OpenGL)");
  const EGLint context_attributes[] = {EGL_CONTEXT_MAJOR_VERSION,
                                       3,
                                       EGL_CONTEXT_MINOR_VERSION,
                                       3,
                                       EGL_CONTEXT_OPENGL_PROFILE_MASK,
                                       EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT,
                                       EGL_NONE};
  EGLContext context = eglCreateContext(display, config, EGL_NO_CONTEXT, context_attributes);
  if (context == EGL_NO_CONTEXT) return egl_failure("eglCreateContext(GL 3.3 core)");
  self->context_ = context;
  if (eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE, context) != EGL_TRUE) {
    return egl_failure("eglMakeCurrent(surfaceless)");
  }
  const auto* renderer = reinterpret_cast<const char*>(glGetString(GL_RENDERER));
  const auto* version = reinterpret_cast<const char*>(glGetString(GL_VERSION));
  self->gl_renderer_ = renderer != nullptr ? renderer : "";
  self->gl_version_ = version != nullptr ? version : "";
  GLint max_samples = 0;
  glGetIntegerv(GL_MAX_SAMPLES, &max_samples);
  self->samples_ = max_samples >= 4 ? 4 : 0;
  self->width_ = width;
  self->height_ = height;
  TESSERA_RETURN_IF_ERROR(self->create_framebuffers());
  return self;
}

OffscreenContext::~OffscreenContext() {
  if (display_ == nullptr) return;
  auto display = static_cast<EGLDisplay>(display_);
  if (context_ != nullptr) {
    if (eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE,
                       static_cast<EGLContext>(context_)) == EGL_TRUE) {
      destroy_framebuffers();
    }
    eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    eglDestroyContext(display, static_cast<EGLContext>(context_));
  }
  // No eglTerminate: the surfaceless display is shared by every context in the process (EGL
  // returns the same handle), and terminating it would break other live OffscreenContexts.
}

Status OffscreenContext::create_framebuffers() {
  auto make = [](GLsizei samples, int width, int height, GLuint* fbo, GLuint* color,
                 GLuint* depth) -> Status {
    glGenFramebuffers(1, fbo);
    glBindFramebuffer(GL_FRAMEBUFFER, *fbo);
    glGenRenderbuffers(1, color);
    glBindRenderbuffer(GL_RENDERBUFFER, *color);
    glRenderbufferStorageMultisample(GL_RENDERBUFFER, samples, GL_RGBA8, width, height);
    glFramebufferRenderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, *color);
    glGenRenderbuffers(1, depth);
    glBindRenderbuffer(GL_RENDERBUFFER, *depth);
    glRenderbufferStorageMultisample(GL_RENDERBUFFER, samples, GL_DEPTH_COMPONENT24, width, height);
    glFramebufferRenderbuffer(GL_FRAMEBUFFER, GL_DEPTH_ATTACHMENT, GL_RENDERBUFFER, *depth);
    const GLenum status = glCheckFramebufferStatus(GL_FRAMEBUFFER);
    if (status != GL_FRAMEBUFFER_COMPLETE) {
      return unsupported("offscreen GL: framebuffer " + std::to_string(width) + "x" +
                         std::to_string(height) + " (" + std::to_string(samples) +
                         " samples) is incomplete (status 0x" + std::to_string(status) + ")");
    }
    return Status();
  };
  TESSERA_RETURN_IF_ERROR(make(0, width_, height_, &fbo_, &color_, &depth_));
  if (samples_ > 0) {
    const Status msaa = make(samples_, width_, height_, &msaa_fbo_, &msaa_color_, &msaa_depth_);
    if (!msaa.ok()) {
      // Multisampling is a nicety: fall back to the single-sample target.
      glDeleteFramebuffers(1, &msaa_fbo_);
      glDeleteRenderbuffers(1, &msaa_color_);
      glDeleteRenderbuffers(1, &msaa_depth_);
      msaa_fbo_ = msaa_color_ = msaa_depth_ = 0;
      samples_ = 0;
    }
  }
  bind_framebuffer();
  glViewport(0, 0, width_, height_);
  return Status();
}

void OffscreenContext::destroy_framebuffers() {
  glBindFramebuffer(GL_FRAMEBUFFER, 0);
  const GLuint fbos[2] = {fbo_, msaa_fbo_};
  glDeleteFramebuffers(2, fbos);
  const GLuint renderbuffers[4] = {color_, depth_, msaa_color_, msaa_depth_};
  glDeleteRenderbuffers(4, renderbuffers);
  fbo_ = color_ = depth_ = msaa_fbo_ = msaa_color_ = msaa_depth_ = 0;
}

Status OffscreenContext::make_current() {
  if (eglMakeCurrent(static_cast<EGLDisplay>(display_), EGL_NO_SURFACE, EGL_NO_SURFACE,
                     static_cast<EGLContext>(context_)) != EGL_TRUE) {
    return egl_failure("eglMakeCurrent");
  }
  bind_framebuffer();
  return Status();
}

Status OffscreenContext::resize(int width, int height) {
  TESSERA_RETURN_IF_ERROR(check_size(width, height));
  destroy_framebuffers();
  width_ = width;
  height_ = height;
  GLint max_samples = 0;
  glGetIntegerv(GL_MAX_SAMPLES, &max_samples);
  samples_ = max_samples >= 4 ? 4 : 0;
  return create_framebuffers();
}

void OffscreenContext::bind_framebuffer() {
  glBindFramebuffer(GL_FRAMEBUFFER, samples_ > 0 ? msaa_fbo_ : fbo_);
}

Expected<Image> OffscreenContext::read_pixels() {
  // Errors raised earlier by someone else's GL calls must not be blamed on the read-back.
  while (glGetError() != GL_NO_ERROR) {
  }
  GLint previous_draw = 0, previous_read = 0;
  glGetIntegerv(GL_DRAW_FRAMEBUFFER_BINDING, &previous_draw);
  glGetIntegerv(GL_READ_FRAMEBUFFER_BINDING, &previous_read);
  if (samples_ > 0) {
    glBindFramebuffer(GL_READ_FRAMEBUFFER, msaa_fbo_);
    glBindFramebuffer(GL_DRAW_FRAMEBUFFER, fbo_);
    glBlitFramebuffer(0, 0, width_, height_, 0, 0, width_, height_, GL_COLOR_BUFFER_BIT,
                      GL_NEAREST);
  }
  glBindFramebuffer(GL_READ_FRAMEBUFFER, fbo_);
  GLint pack_alignment = 4;
  glGetIntegerv(GL_PACK_ALIGNMENT, &pack_alignment);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  Image image;
  image.width = width_;
  image.height = height_;
  image.rgba.resize(static_cast<size_t>(width_) * static_cast<size_t>(height_) * 4);
  glReadPixels(0, 0, width_, height_, GL_RGBA, GL_UNSIGNED_BYTE, image.rgba.data());
  glPixelStorei(GL_PACK_ALIGNMENT, pack_alignment);
  glBindFramebuffer(GL_DRAW_FRAMEBUFFER, static_cast<GLuint>(previous_draw));
  glBindFramebuffer(GL_READ_FRAMEBUFFER, static_cast<GLuint>(previous_read));
  const GLenum error = glGetError();
  if (error != GL_NO_ERROR) {
    return internal_error("offscreen GL: glReadPixels failed (GL error " + std::to_string(error) +
                          ")");
  }
  // GL's origin is the bottom-left corner; images are stored top row first.
  const size_t row = static_cast<size_t>(width_) * 4;
  std::vector<uint8_t> tmp(row);
  for (int y = 0; y < height_ / 2; ++y) {
    uint8_t* a = &image.rgba[static_cast<size_t>(y) * row];
    uint8_t* b = &image.rgba[static_cast<size_t>(height_ - 1 - y) * row];
    std::memcpy(tmp.data(), a, row);
    std::memcpy(a, b, row);
    std::memcpy(b, tmp.data(), row);
  }
  return image;
}

}  // namespace tessera::render
