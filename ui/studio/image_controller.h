// ImageController: the concept image and its projection onto the shape (the runtime's image and
// texture lanes, through DiffusionBridge and TextureBridge, which it owns). It keeps the image
// settings the Diffusion overlay panel edits, generates the prompt bar's image (a new random seed
// unless the seed is locked), follows the shape lane (a new shape cancels the old prompt's image
// and, with "image after each shape" on, queues the new prompt's image behind the shape; Cancel
// takes an image still waiting for the shape with it), projects a finished image onto the shown
// mesh and shows the textured copy, and fills the panel's data at every change. The window lays
// out the viewport and prompt it reads and wires its signals. UI thread only.
#pragma once

#include <QObject>
#include <QString>
#include <cstdint>
#include <memory>
#include <optional>

#include "core/status.h"
#include "engine/mesh/mesh.h"
#include "engine/mesh/texture.h"
#include "ui/studio/diffusion_bridge.h"
#include "ui/studio/diffusion_panel.h"

namespace tessera::studio {

class EngineBridge;
class PromptEdit;
class TextureBridge;
class Viewport;

class ImageController : public QObject {
  Q_OBJECT

 public:
  // `prompt` and `viewport` outlive the controller; the viewport draws the Diffusion panel from
  // the controller's data until the destructor takes it back.
  ImageController(EngineBridge& engine, const PromptEdit& prompt, Viewport& viewport,
                  QObject* parent = nullptr);
  ~ImageController() override;

  DiffusionBridge& diffusion() { return *diffusion_; }
  TextureBridge& texture() { return *texture_; }
  ImageSettings& settings() { return settings_; }
  // Concept image of the prompt bar's text with the panel's settings (a new random seed unless the
  // seed is locked); replaces a running image job. Returns false (message in the panel and the
  // status bar) when no diffusion model is ready.
  bool generate();
  void cancel();
  // Projects the finished concept image onto the shown mesh (a runtime texture job: front view,
  // engine/mesh/texture.h) and, when it is done, shows the textured copy (textured() follows);
  // exports then carry the texture. What can be checked now (no final image, no mesh) comes back
  // as an error; a projection failure goes to the status bar.
  Status apply_as_texture();
  // The running texture job (0: none).
  uint64_t texture_job() const;
  // Paints the shown mesh with the prompt bar's text and the panel's settings (a runtime paint job
  // on the image lane: docs/texture-painting.md); each view lands on the mesh in the viewport, and
  // the painted mesh is shown and kept by the library (textured() follows). What can be checked
  // now (no model, no mesh, a shape job running, the settings) comes back as an error.
  Status paint_mesh();
  // A shape job started: the new prompt's image queued behind it (when asked for), else the old
  // prompt's image cancelled.
  void follow_shape_started();
  // The shape job is being cancelled: an image waiting for it goes too.
  void follow_shape_cancelled();
  // The shape job finished: with "start from the viewport", the image of the new mesh's view
  // (when asked for after each shape); nothing otherwise (the image was queued at the start).
  void follow_shape_done();
  // The Diffusion panel's data from the bridges, the shown mesh and the shape lane.
  void refresh_panel();

 Q_SIGNALS:
  void status(const QString& text, bool error);
  // The concept image is finished (the library keeps it beside the job's results).
  void imageDone();
  // The projection is done and `textured` (a copy of `source`) is shown.
  void textured(const std::shared_ptr<const tessera::mesh::Mesh>& source,
                const std::shared_ptr<const tessera::mesh::Mesh>& textured);
  // What can be done changed (a texture job ended, the textured mesh is shown).
  void changed();

 private:
  void on_action(DiffusionAction action);
  // Whether the next image reads the viewport (starts from its view or follows its depth): it
  // then waits for the finished mesh.
  bool uses_viewport() const {
    return settings_.init_source == ImageSettings::InitSource::kViewport ||
           settings_.control_source == ImageSettings::ControlSource::kViewportDepth;
  }
  // Image-to-image's picture, the ControlNet's control image and the mask from the settings (the
  // viewport's view or depth, or files). An error names the file or says why the view could not
  // be captured.
  Status image_inputs(std::shared_ptr<const mesh::TextureImage>* init,
                      std::shared_ptr<const mesh::TextureImage>* control,
                      std::shared_ptr<const mesh::TextureImage>* mask);
  void on_image_finished(quint64 job, int state, const QString& message);
  void on_paint_view(const std::shared_ptr<const mesh::Mesh>& painted);
  void on_painted(const std::shared_ptr<const mesh::Mesh>& painted);
  void on_textured(const std::shared_ptr<const mesh::Mesh>& source,
                   const std::shared_ptr<const mesh::Mesh>& textured,
                   const std::optional<mesh::ImageRect>& object);

  EngineBridge& engine_;
  const PromptEdit& prompt_;
  Viewport& viewport_;
  DiffusionBridge* diffusion_ = nullptr;
  TextureBridge* texture_ = nullptr;
  ImageSettings settings_;
  std::shared_ptr<const mesh::Mesh> paint_source_;  // the mesh the running paint started from
  DiffusionPanelData panel_data_;                   // the panel reads it at every paint
};

}  // namespace tessera::studio
