// Paint jobs (Session::submit_paint; docs/texture-painting.md): the atlas, the views, then per
// view the depth ControlNet image (and, after the first, the inpainting of what earlier views
// left), baked into the texture; the unseen texels filled last. Runs on the image lane, each view
// through make_image (so a view is an image job: its steps are reported, a shape job may take the
// machine between steps, cancel stops it).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/trace.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/paint_views.h"
#include "engine/mesh/texture_bake.h"
#include "engine/mesh/uv_atlas.h"
#include "engine/runtime/image_inputs.h"
#include "engine/runtime/session_internal.h"

namespace tessera::runtime {

namespace {

std::shared_ptr<mesh::TextureImage> share(mesh::TextureImage image) {
  return std::make_shared<mesh::TextureImage>(std::move(image));
}

}  // namespace

Status check_paint_job(const PaintJobOptions& o) {
  if (!mesh::is_atlas_size(o.texture_size)) {
    return invalid_argument("texture size " + std::to_string(o.texture_size) +
                            " is not 1024, 2048 or 4096");
  }
  if (o.max_triangles < 0) {
    return invalid_argument("triangle limit " + std::to_string(o.max_triangles) +
                            " must be >= 0 (0: none)");
  }
  if (o.image.init_image != nullptr || o.image.mask != nullptr ||
      o.image.control_image != nullptr) {
    return invalid_argument(
        "a paint job makes its own init images, masks and depth maps: give none");
  }
  // Its ControlNet is given the mesh's depth per view: checked as an image job with a depth map.
  ImageJobOptions image = o.image;
  if (!image.control_model.empty()) image.control_image = std::make_shared<mesh::TextureImage>();
  TESSERA_RETURN_IF_ERROR(check_image_job(image));
  TESSERA_RETURN_IF_ERROR(mesh::validate_view_set(o.views));
  if (o.view_size != 0 &&
      (o.view_size < mesh::kMinPaintViewSize || o.view_size > mesh::kMaxPaintViewSize)) {
    return invalid_argument("view size " + std::to_string(o.view_size) + " is outside " +
                            std::to_string(mesh::kMinPaintViewSize) + ".." +
                            std::to_string(mesh::kMaxPaintViewSize));
  }
  return Status();
}

void Session::Impl::run_paint_job(uint64_t id, const PaintJobOptions& o,
                                  std::atomic<bool>& cancel) {
  const Lane lane = Lane::kImage;
  Stopwatch total;
  if (image_ == nullptr) {
    return emit(id, lane, ErrorEvent{not_found("no diffusion model is loaded")});
  }
  if (o.mesh == nullptr) return emit(id, lane, ErrorEvent{invalid_argument("no mesh to paint")});
  if (Status st = mesh::validate(*o.mesh); !st.ok()) return emit(id, lane, ErrorEvent{st});
  if (o.mesh->triangles.empty()) {
    return emit(id, lane, ErrorEvent{invalid_argument("the mesh to paint has no triangles")});
  }
  if (Status st = check_paint_job(o); !st.ok()) return emit(id, lane, ErrorEvent{st});
  auto views = mesh::plan_views(*o.mesh, o.views);
  if (!views.ok()) return emit(id, lane, ErrorEvent{views.status()});
  // The model's size rule: a multiple of its step, at least the smallest view.
  const int64_t multiple = image_->size_multiple();
  int64_t size = o.view_size > 0 ? o.view_size : image_->default_image_size();
  size = std::max<int64_t>(size / multiple * multiple,
                           (mesh::kMinPaintViewSize + multiple - 1) / multiple * multiple);
  std::vector<std::string> notes;
  if (o.view_size > 0 && size != o.view_size) {
    notes.push_back("view size " + std::to_string(o.view_size) + " rounded to " +
                    std::to_string(size) + " (a multiple of " + std::to_string(multiple) + ")");
  }
  auto on_wait = [&](bool waiting) {
    emit(id, lane, WaitingEvent{waiting, waiting ? "waiting for the shape job" : ""});
  };
  if (!scheduler_.wait_image_turn(cancel, on_wait)) {
    return emit(id, lane, CancelledEvent{"cancelled before it started"});
  }

  // A mesh over the triangle limit: simplified first, and said.
  std::shared_ptr<const mesh::Mesh> source = o.mesh;
  if (o.max_triangles > 0 && source->triangle_count() > o.max_triangles) {
    auto reduced = std::make_shared<mesh::Mesh>(*source);
    if (Status st = mesh::reduce_triangles(*reduced, o.max_triangles); !st.ok()) {
      return emit(id, lane,
                  ErrorEvent{invalid_argument(
                      "the mesh has " + std::to_string(source->triangle_count()) +
                      " triangles, over the painter's limit of " + std::to_string(o.max_triangles) +
                      ", and could not be simplified (" + st.message() + "): simplify it first")});
    }
    notes.push_back("simplified from " + std::to_string(source->triangle_count()) + " to " +
                    std::to_string(reduced->triangle_count()) +
                    " triangles first (the painter's limit is " + std::to_string(o.max_triangles) +
                    ")");
    source = std::move(reduced);
  }
  // The atlas (or the mesh's own uvs).
  Stopwatch atlas_time;
  mesh::AtlasOptions atlas;
  atlas.size = o.texture_size;
  atlas.replace_existing = o.new_atlas;
  atlas.cancel = &cancel;
  mesh::AtlasReport report;
  // The mesh's own uvs are kept only when they give every triangle its own texels.
  if (!o.new_atlas && !source->uvs.empty()) {
    auto own = mesh::check_uv_atlas(*source, o.texture_size);
    if (own.ok() && own->overlapping > 0) {
      atlas.replace_existing = true;
      notes.push_back("the mesh's uvs overlap (" + std::to_string(own->overlapping) +
                      " triangle pairs share texels): painted on a new atlas");
    }
  }
  auto laid = mesh::make_uv_atlas(*source, atlas, &report);
  if (!laid.ok()) {
    if (laid.status().code() == ErrorCode::kCancelled) {
      return emit(id, lane, CancelledEvent{laid.status().message()});
    }
    return emit(id, lane, ErrorEvent{laid.status()});
  }
  mesh::Mesh base = std::move(*laid);
  base.texture = mesh::TextureImage{};
  emit(id, lane, StageEvent{kStagePaintAtlas, atlas_time.elapsed_ms()});
  auto texels = mesh::map_texels(base, o.texture_size);
  if (!texels.ok()) return emit(id, lane, ErrorEvent{texels.status()});
  mesh::BakeAccumulator state(o.texture_size);
  mesh::BakeResult so_far;  // finish_bake of `state`, made once per view (the last is the result)

  std::vector<mesh::ViewRaster> rasters;
  std::vector<std::shared_ptr<const mesh::TextureImage>> images;
  std::vector<std::string> names;
  const int n = static_cast<int>(views->size());
  for (int v = 0; v < n; ++v) {
    if (cancel.load()) return emit(id, lane, CancelledEvent{"cancelled"});
    const mesh::PaintView& view = (*views)[static_cast<size_t>(v)];
    mesh::PaintMaskOptions masking;
    masking.band = static_cast<int>(std::max<int64_t>(1, size / 128));  // 4 at 512
    Stopwatch rendering;
    auto inputs = mesh::prepare_view(base, *texels, state, view, static_cast<int>(size), masking,
                                     so_far.texture.empty() ? nullptr : &so_far.texture);
    if (!inputs.ok()) return emit(id, lane, ErrorEvent{inputs.status()});
    PaintViewEvent event;
    event.render_ms = rendering.elapsed_ms();
    event.view = v;
    event.views = n;
    event.name = view.name;
    event.generated_share = inputs->object_pixels > 0
                                ? static_cast<double>(inputs->generate_pixels) /
                                      static_cast<double>(inputs->object_pixels)
                                : 0.0;
    if (inputs->generate_pixels > 0) {
      ImageJobOptions job = o.image;
      job.prompt += view.prompt_suffix;
      job.width = job.height = size;
      job.seed = o.image.seed + static_cast<uint64_t>(v);
      job.control_image = share(inputs->depth);
      if (v > 0) {
        job.init_image = share(inputs->init);
        job.mask = share(inputs->mask);
        job.strength = 1.0f;
      }
      // Each view is an image job: it waits for a running shape job as one would.
      if (!scheduler_.wait_image_turn(cancel, on_wait)) {
        return emit(id, lane, CancelledEvent{"cancelled"});
      }
      Stopwatch generating;
      auto made = make_image(id, job, cancel);
      if (!made.ok()) {
        if (made.status().code() == ErrorCode::kCancelled) {
          return emit(id, lane, CancelledEvent{made.status().message()});
        }
        return emit(id, lane, ErrorEvent{made.status().with_context("view " + view.name)});
      }
      event.generate_ms = generating.elapsed_ms();
      event.text_ms = made->image.text_ms;
      event.encode_ms = made->image.encode_ms;
      event.denoise_ms = made->image.denoise_ms;
      event.decode_ms = made->image.vae_ms;
      for (std::string& note : made->notes) {
        if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
      }
      mesh::TextureImage generated;
      generated.width = made->image.width;
      generated.height = made->image.height;
      generated.rgb = std::move(made->image.rgb);
      Stopwatch baking;
      auto baked = mesh::bake_view(base, *texels, view.camera, inputs->raster, generated, &state,
                                   static_cast<int>(std::max<int64_t>(1, size / 256)));
      if (!baked.ok()) return emit(id, lane, ErrorEvent{baked.status()});
      event.bake_ms = baking.elapsed_ms();
      event.image = share(std::move(generated));
      event.mask = share(std::move(inputs->mask));
      images.push_back(event.image);
      rasters.push_back(std::move(inputs->raster));
      names.push_back(view.name);
    }
    Stopwatch filling_view;
    so_far = mesh::finish_bake(base, *texels, state);
    auto painted = std::make_shared<mesh::Mesh>(base);
    painted->texture = so_far.texture;
    event.painted = std::move(painted);
    event.fill_ms = filling_view.elapsed_ms();
    emit(id, lane, std::move(event));
  }

  Stopwatch filling;
  mesh::BakeResult result = std::move(so_far);  // the last view's bake: nothing changed since
  if (!(result.coverage > 0)) {
    return emit(id, lane,
                ErrorEvent{invalid_argument(
                    "no view saw the surface (" + std::to_string(n) +
                    " views; a flat mesh seen edge-on?): add views or change their elevation")});
  }
  auto painted = std::make_shared<mesh::Mesh>(std::move(base));
  painted->texture = std::move(result.texture);
  emit(id, lane, StageEvent{kStagePaintFill, filling.elapsed_ms()});
  PaintedMeshEvent done;
  done.new_atlas = !report.kept_existing;
  done.view_size = size;
  done.coverage = result.coverage;
  done.view_names = std::move(names);
  Stopwatch checking;
  for (size_t i = 0; i < rasters.size(); ++i) {
    const mesh::TextureImage seen = mesh::render_textured_view(*painted, rasters[i]);
    done.agreement_db.push_back(mesh::masked_psnr(seen, *images[i], rasters[i]));
  }
  if (auto seams = mesh::seam_error(*painted); seams.ok()) {
    done.seam_mean = seams->mean;
    done.seam_p95 = seams->p95;
  } else {
    notes.push_back("seam error not measured: " + seams.status().message());
  }
  emit(id, lane, StageEvent{kStagePaintCheck, checking.elapsed_ms()});
  done.notes = std::move(notes);
  done.mesh = std::move(painted);
  emit(id, lane, std::move(done));
  emit(id, lane, DoneEvent{total.elapsed_ms()});
}

}  // namespace tessera::runtime
