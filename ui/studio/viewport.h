// Viewport: the studio's 3D view, a QOpenGLWidget (GL 3.3 core: set the default QSurfaceFormat
// with make_default_surface_format() before the QApplication exists) that draws the current mesh
// with render::MeshRenderer and an OrbitCamera, then the ImGui overlay on top.
//
// Mouse: left-drag orbits, middle-drag or shift+left-drag pans, the wheel zooms; events over an
// ImGui panel (or drags that started on one) go to ImGui only. F frames the mesh (an action with
// a widget-local shortcut, so typing "f" in the prompt never triggers it). Files dropped on the
// view are reported with meshDropped(); the main window imports them.
//
// Meshes: set_mesh() may be called at any time (before the GL context exists, from signal
// handlers); the upload happens at the next paint. The widget keeps a shared reference to the
// mesh it shows (mesh()) for export and the gallery.
//
// Frame timing: the widget repaints on a ~60 Hz timer; every paint is timestamped so callers (the
// frame-time test, the status bar) can read the largest gap between frames since a reset.
#pragma once

#include <QElapsedTimer>
#include <QOpenGLWidget>
#include <QPoint>
#include <QString>
#include <QSurfaceFormat>
#include <QTimer>
#include <memory>

#include "engine/mesh/mesh.h"
#include "ui/render/camera.h"
#include "ui/render/renderer.h"
#include "ui/studio/generation_stats.h"
#include "ui/studio/imgui_overlay.h"

class QAction;

namespace tessera::studio {

// GL 3.3 core, 24-bit depth, no MSAA unless $TESSERA_STUDIO_MSAA says how many samples: call
// QSurfaceFormat::setDefaultFormat() with it before constructing QApplication.
QSurfaceFormat make_default_surface_format();

class Viewport : public QOpenGLWidget {
  Q_OBJECT

 public:
  explicit Viewport(QWidget* parent = nullptr);
  ~Viewport() override;

  // Shows `mesh` (null clears). `frame`: fit the camera to it once it is uploaded.
  void set_mesh(std::shared_ptr<const mesh::Mesh> mesh, bool frame);
  // Fits the camera to `bounds` at the next paint (e.g. the decoder's cube while a shape forms,
  // so the camera stays put as previews grow).
  void frame_bounds(const mesh::Bounds& bounds);
  std::shared_ptr<const mesh::Mesh> mesh() const { return mesh_; }
  // The stats snapshot the overlay draws (not owned; must outlive the widget or be reset).
  void set_stats(const GenerationStats* stats) { stats_ = stats; }
  // What the Diffusion panel shows and edits (not owned; null: the panel says no engine is
  // attached). Its on_action is called during paint.
  void set_diffusion_panel(DiffusionPanelData* data) { diffusion_ = data; }
  // The overlay's A/B switches and device line (may be null; owned by the caller).
  void set_overlay_controls(OverlayControls* controls) { controls_ = controls; }

  // The shown mesh drawn from the current camera into a `side` x `side` RGB8 picture (no grid,
  // axes or overlay): what "start from the viewport" gives image-to-image. Empty (width 0) when
  // there is no GL context or renderer yet; `error` then says why.
  mesh::TextureImage capture_view(int side, QString* error);
  // The shown mesh's depth from the current camera (the view capture_view gives) as a ControlNet
  // depth map (ui/render/depth.h), side x side; empty with `error` set when there is no renderer
  // or framebuffer.
  mesh::TextureImage capture_depth(int side, QString* error);

  render::RenderOptions& render_options() { return options_; }
  OverlayPanels& panels() { return panels_; }
  void set_overlay_visible(bool visible) { overlay_visible_ = visible; }
  // A small tile (the candidate grid): no overlay and no continuous repaint (a frame when the
  // mesh or the camera changes). Call before the widget is first shown.
  void set_tile_mode(bool on);
  bool overlay_visible() const { return overlay_visible_; }
  void set_turntable(bool on) { turntable_ = on; }
  bool turntable() const { return turntable_; }
  void frame_mesh();
  const render::OrbitCamera& camera() const { return camera_; }
  QAction* frame_action() const { return frame_action_; }

  // GL_RENDERER / GL_VERSION of the context (empty before the first paint), and the last
  // renderer error (empty when fine).
  QString gl_description() const { return gl_description_; }
  QString render_error() const { return render_error_; }

  // Frame timing since reset_frame_stats().
  void reset_frame_stats();
  int64_t frames() const { return frames_; }
  double max_frame_gap_ms() const { return max_gap_ms_; }

 Q_SIGNALS:
  void frameRendered();
  void meshDropped(const QString& path);
  void glError(const QString& message);

 protected:
  void initializeGL() override;
  void resizeGL(int w, int h) override;
  void paintGL() override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  void keyReleaseEvent(QKeyEvent* event) override;
  void leaveEvent(QEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  // capture_view / capture_depth: one frame of the shown mesh into an offscreen framebuffer.
  mesh::TextureImage capture(int side, bool depth, QString* error);
  enum class Drag { kNone, kOrbit, kPan, kImGui };
  void release_gl();
  bool forward_key(QKeyEvent* event, bool down);

  std::unique_ptr<render::MeshRenderer> renderer_;
  ImGuiOverlay overlay_;
  render::OrbitCamera camera_;
  render::RenderOptions options_;
  OverlayPanels panels_;
  bool overlay_visible_ = true;
  bool turntable_ = false;
  const GenerationStats* stats_ = nullptr;
  DiffusionPanelData* diffusion_ = nullptr;
  OverlayControls* controls_ = nullptr;
  GenerationStats empty_stats_;

  std::shared_ptr<const mesh::Mesh> mesh_;
  bool mesh_dirty_ = false;
  bool frame_pending_ = false;
  bool frame_bounds_pending_ = false;
  mesh::Bounds pending_bounds_{};

  Drag drag_ = Drag::kNone;
  QPoint last_pos_;
  QTimer repaint_timer_;
  bool tile_mode_ = false;
  QElapsedTimer clock_;
  qint64 last_paint_ns_ = -1;
  int64_t frames_ = 0;
  double max_gap_ms_ = 0;
  QString gl_description_, render_error_;
  QAction* frame_action_ = nullptr;
};

}  // namespace tessera::studio
