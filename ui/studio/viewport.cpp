#include "ui/studio/viewport.h"

#include <QImage>
#include <QOpenGLFramebufferObject>
#include <QOpenGLFramebufferObjectFormat>
#include <cstring>
#include "ui/render/depth.h"

#include <QAction>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QKeyEvent>
#include <QMimeData>
#include <QMouseEvent>
#include <QOpenGLContext>
#include <QOpenGLFunctions>
#include <QWheelEvent>
#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace tessera::studio {

QSurfaceFormat make_default_surface_format() {
  QSurfaceFormat format;
  format.setRenderableType(QSurfaceFormat::OpenGL);
  format.setVersion(3, 3);
  format.setProfile(QSurfaceFormat::CoreProfile);
  format.setDepthBufferSize(24);
  format.setStencilBufferSize(8);
  // No MSAA by default: on software GL (llvmpipe under Xvfb, remote desktops) 4x MSAA halves the
  // frame rate; TESSERA_STUDIO_MSAA=4 turns it on where a GPU makes it free.
  const char* msaa = std::getenv("TESSERA_STUDIO_MSAA");
  format.setSamples(msaa != nullptr ? std::clamp(std::atoi(msaa), 0, 16) : 0);
  return format;
}

Viewport::Viewport(QWidget* parent) : QOpenGLWidget(parent) {
  setMinimumSize(64, 64);
  setMouseTracking(true);  // hover positions for ImGui, so it knows which clicks are its own
  setFocusPolicy(Qt::StrongFocus);
  setAcceptDrops(true);
  frame_action_ = new QAction(tr("&Frame mesh"), this);
  frame_action_->setShortcut(QKeySequence(Qt::Key_F));
  frame_action_->setShortcutContext(Qt::WidgetShortcut);
  addAction(frame_action_);
  connect(frame_action_, &QAction::triggered, this, &Viewport::frame_mesh);
  repaint_timer_.setInterval(16);
  connect(&repaint_timer_, &QTimer::timeout, this, qOverload<>(&QWidget::update));
  repaint_timer_.start();
  clock_.start();
}

Viewport::~Viewport() {
  release_gl();
}

void Viewport::set_tile_mode(bool on) {
  tile_mode_ = on;
  overlay_visible_ = !on;
  if (on) {
    repaint_timer_.stop();
  } else {
    repaint_timer_.start();
  }
}

void Viewport::release_gl() {
  if (!renderer_ && !overlay_.initialized()) return;
  // GL objects belong to this widget's context: make it current to free them.
  makeCurrent();
  renderer_.reset();
  overlay_.shutdown();
  doneCurrent();
}

void Viewport::set_mesh(std::shared_ptr<const mesh::Mesh> mesh, bool frame) {
  mesh_ = std::move(mesh);
  mesh_dirty_ = true;
  frame_pending_ = frame_pending_ || frame;
  update();
}

void Viewport::frame_bounds(const mesh::Bounds& bounds) {
  pending_bounds_ = bounds;
  frame_bounds_pending_ = true;
  frame_pending_ = false;
  update();
}

void Viewport::frame_mesh() {
  if (renderer_ && renderer_->has_mesh()) {
    camera_.frame_to_fit(renderer_->bounds(),
                         static_cast<float>(std::max(width(), 1)) / std::max(height(), 1));
  } else {
    frame_pending_ = true;
  }
  update();
}

void Viewport::reset_frame_stats() {
  frames_ = 0;
  max_gap_ms_ = 0;
  last_paint_ns_ = -1;
}

void Viewport::initializeGL() {
  // The context can be recreated (re-parenting the widget): drop the old objects first.
  connect(context(), &QOpenGLContext::aboutToBeDestroyed, this, &Viewport::release_gl,
          Qt::UniqueConnection);
  QOpenGLFunctions* gl = context()->functions();
  const auto* renderer = reinterpret_cast<const char*>(gl->glGetString(GL_RENDERER));
  const auto* version = reinterpret_cast<const char*>(gl->glGetString(GL_VERSION));
  gl_description_ = QStringLiteral("%1, OpenGL %2")
                        .arg(QString::fromLatin1(renderer ? renderer : "?"),
                             QString::fromLatin1(version ? version : "?"));
  auto created = render::MeshRenderer::create();
  if (!created.ok()) {
    render_error_ = QString::fromStdString(created.status().message());
    Q_EMIT glError(render_error_);
  } else {
    renderer_ = std::move(created).value();
    mesh_dirty_ = true;
  }
  if (tile_mode_) return;  // tiles draw no overlay
  if (Status st = overlay_.init(); !st.ok()) {
    render_error_ = QString::fromStdString(st.message());
    Q_EMIT glError(render_error_);
  }
}

void Viewport::resizeGL(int, int h) {
  camera_.viewport_height = std::max(h, 1);
}

mesh::TextureImage Viewport::capture_view(int side, QString* error) {
  return capture(side, false, error);
}

mesh::TextureImage Viewport::capture_depth(int side, QString* error) {
  return capture(side, true, error);
}

mesh::TextureImage Viewport::capture(int side, bool depth, QString* error) {
  mesh::TextureImage out;
  if (context() == nullptr || !renderer_) {
    if (error)
      *error = tr("the viewport has no renderer yet") +
               (render_error_.isEmpty() ? QString() : QStringLiteral(": ") + render_error_);
    return out;
  }
  makeCurrent();
  {
    QOpenGLFramebufferObjectFormat format;
    format.setAttachment(QOpenGLFramebufferObject::Depth);
    QOpenGLFramebufferObject fbo(side, side, format);
    if (!fbo.isValid() || !fbo.bind()) {
      if (error) *error = tr("could not make a %1x%1 framebuffer").arg(side);
      doneCurrent();
      return out;
    }
    if (mesh_dirty_) {
      mesh_dirty_ = false;
      if (mesh_) {
        (void)renderer_->set_mesh(*mesh_);
      } else {
        renderer_->clear_mesh();
      }
    }
    render::RenderOptions options = options_;
    options.grid = false;
    options.axes = false;
    options.wireframe = false;
    if (depth) {
      options.shading = render::ShadingMode::kDepth;
      options.background = {0.0f, 0.0f, 0.0f, 1.0f};
    }
    render::OrbitCamera camera = camera_;
    camera.viewport_height = side;
    renderer_->draw(camera, options, side, side);
    if (depth) {
      const QImage rgba = fbo.toImage(true).convertToFormat(QImage::Format_RGBA8888);
      fbo.release();
      render::Image frame;
      frame.width = rgba.width();
      frame.height = rgba.height();
      frame.rgba.resize(static_cast<size_t>(frame.width) * frame.height * 4);
      for (int y = 0; y < rgba.height(); ++y) {
        std::memcpy(frame.rgba.data() + static_cast<size_t>(y) * frame.width * 4,
                    rgba.constScanLine(y), static_cast<size_t>(frame.width) * 4);
      }
      out = render::depth_map_from_frame(frame);
      doneCurrent();
      return out;
    }
    const QImage image = fbo.toImage(true).convertToFormat(QImage::Format_RGB888);
    fbo.release();
    out.width = image.width();
    out.height = image.height();
    out.rgb.resize(static_cast<size_t>(out.width * out.height * 3));
    for (int y = 0; y < image.height(); ++y) {
      std::memcpy(out.rgb.data() + static_cast<size_t>(y) * out.width * 3, image.constScanLine(y),
                  static_cast<size_t>(out.width) * 3);
    }
  }
  doneCurrent();
  return out;
}

void Viewport::paintGL() {
  const qint64 now_ns = clock_.nsecsElapsed();
  if (last_paint_ns_ >= 0) {
    const double gap_ms = static_cast<double>(now_ns - last_paint_ns_) / 1e6;
    if (turntable_) camera_.turntable(static_cast<float>(std::min(gap_ms, 100.0) * 1e-3 * 0.6));
    max_gap_ms_ = std::max(max_gap_ms_, gap_ms);
  }
  last_paint_ns_ = now_ns;
  ++frames_;

  const qreal dpr = devicePixelRatioF();
  const int fb_w = std::max(1, static_cast<int>(width() * dpr));
  const int fb_h = std::max(1, static_cast<int>(height() * dpr));
  if (renderer_) {
    if (mesh_dirty_) {
      mesh_dirty_ = false;
      if (mesh_) {
        if (Status st = renderer_->set_mesh(*mesh_); !st.ok()) {
          render_error_ = QString::fromStdString(st.message());
          Q_EMIT glError(render_error_);
        }
      } else {
        renderer_->clear_mesh();
      }
    }
    if (frame_bounds_pending_) {
      frame_bounds_pending_ = false;
      camera_.frame_to_fit(pending_bounds_, static_cast<float>(fb_w) / fb_h);
    }
    if (frame_pending_ && renderer_->has_mesh()) {
      frame_pending_ = false;
      camera_.frame_to_fit(renderer_->bounds(), static_cast<float>(fb_w) / fb_h);
    }
    renderer_->draw(camera_, options_, fb_w, fb_h);
  } else {
    QOpenGLFunctions* gl = context()->functions();
    gl->glClearColor(0.3f, 0.05f, 0.05f, 1.0f);
    gl->glClear(GL_COLOR_BUFFER_BIT | GL_DEPTH_BUFFER_BIT);
  }
  if (overlay_visible_ && overlay_.initialized()) {
    overlay_.render(stats_ ? *stats_ : empty_stats_, panels_, width(), height(),
                    static_cast<float>(dpr), diffusion_, controls_);
  }
  Q_EMIT frameRendered();
}

void Viewport::mousePressEvent(QMouseEvent* event) {
  const QPointF p = event->position();
  overlay_.mouse_move(static_cast<float>(p.x()), static_cast<float>(p.y()));
  if (drag_ == Drag::kNone) {
    if (overlay_visible_ && overlay_.wants_mouse()) {
      drag_ = Drag::kImGui;
    } else if (event->button() == Qt::MiddleButton ||
               (event->button() == Qt::LeftButton && (event->modifiers() & Qt::ShiftModifier))) {
      drag_ = Drag::kPan;
    } else if (event->button() == Qt::LeftButton) {
      drag_ = Drag::kOrbit;
    }
  }
  if (drag_ == Drag::kImGui) {
    const int button = event->button() == Qt::LeftButton     ? 0
                       : event->button() == Qt::RightButton  ? 1
                       : event->button() == Qt::MiddleButton ? 2
                                                             : -1;
    overlay_.mouse_button(button, true);
  }
  last_pos_ = p.toPoint();
  setFocus(Qt::MouseFocusReason);
  event->accept();
}

void Viewport::mouseReleaseEvent(QMouseEvent* event) {
  if (drag_ == Drag::kImGui) {
    const int button = event->button() == Qt::LeftButton     ? 0
                       : event->button() == Qt::RightButton  ? 1
                       : event->button() == Qt::MiddleButton ? 2
                                                             : -1;
    overlay_.mouse_button(button, false);
  }
  if (event->buttons() == Qt::NoButton) drag_ = Drag::kNone;
  event->accept();
}

void Viewport::mouseMoveEvent(QMouseEvent* event) {
  const QPointF p = event->position();
  overlay_.mouse_move(static_cast<float>(p.x()), static_cast<float>(p.y()));
  const QPoint delta = p.toPoint() - last_pos_;
  last_pos_ = p.toPoint();
  if (drag_ == Drag::kOrbit) {
    camera_.orbit(static_cast<float>(delta.x()), static_cast<float>(delta.y()));
  } else if (drag_ == Drag::kPan) {
    camera_.pan(static_cast<float>(delta.x() * devicePixelRatioF()),
                static_cast<float>(delta.y() * devicePixelRatioF()));
  }
  if (tile_mode_ && drag_ != Drag::kNone) update();
  event->accept();
}

void Viewport::wheelEvent(QWheelEvent* event) {
  const float steps = static_cast<float>(event->angleDelta().y()) / 120.0f;
  if (overlay_visible_ && overlay_.wants_mouse()) {
    overlay_.mouse_wheel(steps);
  } else {
    camera_.zoom(steps);
  }
  if (tile_mode_) update();
  event->accept();
}

void Viewport::leaveEvent(QEvent* event) {
  overlay_.mouse_leave();
  QOpenGLWidget::leaveEvent(event);
}

bool Viewport::forward_key(QKeyEvent* event, bool down) {
  overlay_.modifiers(event->modifiers() & Qt::ControlModifier,
                     event->modifiers() & Qt::ShiftModifier, event->modifiers() & Qt::AltModifier);
  if (!overlay_visible_ || !overlay_.wants_keyboard()) return false;
  static const std::pair<int, OverlayKey> kKeys[] = {{Qt::Key_Tab, OverlayKey::kTab},
                                                     {Qt::Key_Left, OverlayKey::kLeft},
                                                     {Qt::Key_Right, OverlayKey::kRight},
                                                     {Qt::Key_Up, OverlayKey::kUp},
                                                     {Qt::Key_Down, OverlayKey::kDown},
                                                     {Qt::Key_PageUp, OverlayKey::kPageUp},
                                                     {Qt::Key_PageDown, OverlayKey::kPageDown},
                                                     {Qt::Key_Home, OverlayKey::kHome},
                                                     {Qt::Key_End, OverlayKey::kEnd},
                                                     {Qt::Key_Insert, OverlayKey::kInsert},
                                                     {Qt::Key_Delete, OverlayKey::kDelete},
                                                     {Qt::Key_Backspace, OverlayKey::kBackspace},
                                                     {Qt::Key_Space, OverlayKey::kSpace},
                                                     {Qt::Key_Return, OverlayKey::kEnter},
                                                     {Qt::Key_Enter, OverlayKey::kEnter},
                                                     {Qt::Key_Escape, OverlayKey::kEscape},
                                                     {Qt::Key_A, OverlayKey::kA},
                                                     {Qt::Key_C, OverlayKey::kC},
                                                     {Qt::Key_V, OverlayKey::kV},
                                                     {Qt::Key_X, OverlayKey::kX},
                                                     {Qt::Key_Y, OverlayKey::kY},
                                                     {Qt::Key_Z, OverlayKey::kZ}};
  for (const auto& [qt_key, ours] : kKeys) {
    if (event->key() == qt_key) overlay_.key(ours, down);
  }
  if (down) overlay_.text(event->text().toStdString());
  return true;
}

void Viewport::keyPressEvent(QKeyEvent* event) {
  if (forward_key(event, true)) return;
  QOpenGLWidget::keyPressEvent(event);
}

void Viewport::keyReleaseEvent(QKeyEvent* event) {
  if (forward_key(event, false)) return;
  QOpenGLWidget::keyReleaseEvent(event);
}

void Viewport::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

void Viewport::dropEvent(QDropEvent* event) {
  const QList<QUrl> urls = event->mimeData()->urls();
  if (urls.isEmpty()) return;
  event->acceptProposedAction();
  Q_EMIT meshDropped(urls.first().isLocalFile() ? urls.first().toLocalFile()
                                                : urls.first().toString());
}

}  // namespace tessera::studio
