// The runtime's event stream: what every job of a Session reports, for every front end (studio,
// CLI, viewer, tests). One stream for both engines: each event names its job (ids are unique within
// a Session, increasing, shared by all lanes) and the lane it ran on.
//
// Per lane, the jobs and their events (in this order; a job that fails or is cancelled stops
// wherever it is and emits only its terminal event after what it already reported):
//   shape generation: Mode, Stage{"text"}, Stage{"prefill"}, Token{0..N-1} (with PartialMesh for
//     the prefixes due every `preview_every` tokens that fit the preview budget; on the CPU a few
//     tokens after their prefix), Stage{"decode"}, Stage{"latent_decode"}, Stage{"extraction"},
//     Stage{"cleanup"}, FinalMesh. With V variations: each step's Token events for candidates
//     0..V-1 in order (PartialMesh per candidate), Stage{"decode"}, then per candidate in order
//     its Stage{"latent_decode"}, Stage{"extraction"}, Stage{"cleanup"} and FinalMesh.
//   shape decode (tokens given): Mode, Stage{"latent_decode"}, Stage{"extraction"},
//     Stage{"cleanup"}, FinalMesh.
//   image: Waiting{true} / Waiting{false} pairs whenever the scheduler holds it for a shape job,
//     ImageStep{0..steps-1}, Stage{"image_text"}, Stage{"denoise"}, Stage{"vae"}, Image.
//   texture projection: TexturedMesh.
//   model load (either lane): ModelLoaded.
// and then exactly one terminal event: Done, Cancelled or Error. Stage ms are wall-clock
// milliseconds of that stage. Events of one job never interleave with those of another job of the
// same lane; events of different lanes do interleave.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/mesh.h"
#include "engine/mesh/texture.h"

namespace tessera::runtime {

// The Session's lanes: each has its own worker thread, queue and cancel. A new job on a lane
// cancels that lane's running job and replaces its queued one; the lanes do not cancel each other.
enum class Lane : uint8_t {
  kShape,    // shape generation and decoding, shape model loads
  kImage,    // concept images, image model loads
  kTexture,  // projecting an image onto a mesh
};
const char* lane_name(Lane lane);  // "shape", "image", "texture"

// Stage names of Stage events.
inline constexpr const char* kStageText = "text";
inline constexpr const char* kStagePrefill = "prefill";
inline constexpr const char* kStageDecode = "decode";
inline constexpr const char* kStageLatentDecode = "latent_decode";
inline constexpr const char* kStageExtraction = "extraction";
inline constexpr const char* kStageCleanup = "cleanup";
inline constexpr const char* kStageImageText = "image_text";
inline constexpr const char* kStageDenoise = "denoise";
inline constexpr const char* kStageVae = "vae";
inline constexpr const char* kStageVaeEncode = "vae_encode";  // image-to-image's init image
inline constexpr const char* kStagePaintAtlas = "atlas";      // a paint job's UV atlas
inline constexpr const char* kStagePaintFill = "fill";        // ... its texture finished
inline constexpr const char* kStagePaintCheck = "check";  // ... its agreement and seams measured

// Whether a shape job replays a recorded decode step (CUDA graphs).
enum class GraphMode : uint8_t {
  kOn,           // recorded once, replayed for every token
  kOff,          // the backend can record, but this job runs eagerly (switched off, or no KV cache)
  kUnavailable,  // the backend cannot record (the CPU backend: the loop runs eagerly there)
};
const char* graph_mode_name(GraphMode mode);  // "on", "off", "n/a"

// First event of a shape job: how it runs.
struct ModeEvent {
  std::string backend;  // e.g. "cpu (avx512, 2 threads)", "cuda (NVIDIA H200, ...)"
  bool kv_cache = true;
  GraphMode graphs = GraphMode::kUnavailable;
  std::string graphs_reason;  // why not kOn (empty when on)
};

struct TokenEvent {
  int64_t index = 0;  // 0-based position in the shape sequence
  int32_t id = 0;     // code in [0, codebook_size)
  double ms = 0;      // time of that generation step (one step serves every candidate)
  int candidate = 0;  // 0..variations-1
};
struct StageEvent {
  std::string name;  // one of kStage*
  double ms = 0;
  int candidate = 0;  // the mesh stages' candidate (0 for the shared text / prefill / decode)
};
struct PartialMeshEvent {
  int64_t tokens = 0;                      // prefix length it was decoded from
  std::shared_ptr<const mesh::Mesh> mesh;  // never null; empty only in a replay (no surface yet)
  int candidate = 0;
  double ms = 0.0;  // what meshing this preview took (latent decode, extraction, clean-up)
};
struct FinalMeshEvent {
  int candidate = 0;  // 0..variations-1
  uint64_t seed = 0;  // the seed candidate sampled with (generation.sampling.seed + candidate)
  std::shared_ptr<const mesh::Mesh> mesh;  // never null
  std::vector<int32_t> tokens;             // the generated (or given) shape tokens
  mesh::ExtractionStats extraction;
  int resolution = 0;     // the final lattice's points per axis that was used
  int prompt_tokens = 0;  // CLIP tokens of the prompt (BOS/EOS included), before truncation
  bool prompt_truncated = false;
  int image_only_tokens = 0;  // colour / material / background words the shape model left out
};

// Image jobs.
struct WaitingEvent {
  bool waiting = false;  // true: held by the scheduler from now; false: running again
  std::string reason;    // e.g. "waiting for the shape job"
};
struct ImageStepEvent {
  int step = 0;  // 0-based
  int steps = 0;
  double sigma = 0;
  double ms = 0;
  // The step's cheap latent->RGB preview (latent resolution); null when the model has none.
  std::shared_ptr<const mesh::TextureImage> preview;
};
struct ImageEvent {
  std::shared_ptr<const mesh::TextureImage> image;  // never null: RGB8, top row first
  uint64_t seed = 0;
  double text_ms = 0, denoise_ms = 0, vae_ms = 0;
  double encode_ms = 0;  // the VAE encoder (image-to-image)
  int steps_run = 0;     // image-to-image runs the last floor(steps x strength)
  // What the runtime did with the job's pictures ("init image resized from 500x375 to 448x320")
  // and models (a LoRA reload, a ControlNet load).
  std::vector<std::string> notes;
  std::string control_net;  // the ControlNet that steered the image ("" when none)
};

// Texture projection jobs.
struct TexturedMeshEvent {
  std::shared_ptr<const mesh::Mesh> mesh;        // never null: uvs + texture atlas
  std::optional<mesh::ImageRect> fitted_object;  // the object rectangle the fit used, if any
};

// Paint jobs (docs/texture-painting.md).
struct PaintViewEvent {
  int view = 0, views = 0;  // 0-based index, count
  std::string name;         // "front", "back", ...
  // What was generated for the view and which pixels (white) were; null when the view had
  // nothing left to paint.
  std::shared_ptr<const mesh::TextureImage> image, mask;
  double generated_share = 0;  // of the view's object pixels
  // Rendering its depth, init and mask; generating its image; baking it into the texels; filling
  // the rest of the texture from the paint so far (the mesh as painted after this view).
  double render_ms = 0, generate_ms = 0, bake_ms = 0, fill_ms = 0;
  // Within generate_ms, as the image job reports them (ImageEvent): the prompt, the init image's
  // encoding, the denoising, the decode.
  double text_ms = 0, encode_ms = 0, denoise_ms = 0, decode_ms = 0;
  std::shared_ptr<const mesh::Mesh> painted;  // the mesh as painted so far (uvs + texture)
};
struct PaintedMeshEvent {
  std::shared_ptr<const mesh::Mesh> mesh;  // never null: uvs + texture
  bool new_atlas = false;                  // the uvs were made by the job
  int64_t view_size = 0;                   // pixels per view side, as made
  double coverage = 0;                     // covered texels some view saw
  std::vector<std::string> view_names;
  std::vector<double> agreement_db;  // per view: generated vs the painted mesh (PSNR)
  // Colour difference across chart borders (mesh/texture_bake.h seam_error), levels 0..255.
  double seam_mean = 0, seam_p95 = 0;
  std::vector<std::string> notes;  // from the image jobs (model, ControlNet loads)
};

// Model loads.
struct ModelLoadedEvent {
  Lane lane = Lane::kShape;
  std::string path;
  std::string description;   // one line for a status bar ("tessera-tiny, 512 tokens, cpu (...)")
  std::string backend;       // where it runs
  std::string backend_note;  // DeviceChoice::kAuto that ended on the CPU: why (else empty)
};

struct ErrorEvent {
  Status status;  // never ok, never kCancelled
};
struct DoneEvent {
  double total_ms = 0;
};
struct CancelledEvent {
  std::string reason;
};

using EventPayload =
    std::variant<ModeEvent, TokenEvent, StageEvent, PartialMeshEvent, FinalMeshEvent, WaitingEvent,
                 ImageStepEvent, ImageEvent, TexturedMeshEvent, PaintViewEvent, PaintedMeshEvent,
                 ModelLoadedEvent, ErrorEvent, DoneEvent, CancelledEvent>;

struct Event {
  uint64_t job = 0;  // id returned by submit*() / load_*()
  Lane lane = Lane::kShape;
  EventPayload payload;

  // Done, Cancelled or Error: the job's last event.
  bool terminal() const {
    return std::holds_alternative<DoneEvent>(payload) ||
           std::holds_alternative<CancelledEvent>(payload) ||
           std::holds_alternative<ErrorEvent>(payload);
  }
};

}  // namespace tessera::runtime
