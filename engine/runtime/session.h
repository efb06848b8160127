// Session: THE door into the engine for every front end (studio, CLI, viewer, scripts). One Session
// serves both engines: the shape engine (Cube 3D-compatible text -> shape tokens -> mesh) and the
// image engine (SD 1.x-compatible text -> concept image), plus texture projection, each on its own
// lane (worker thread, queue, cancel; engine/runtime/lane_internal.h), all reporting into ONE event
// stream (engine/runtime/events.h) and scheduled together: while a shape job runs, image work on
// the same device waits between its steps (Scheduler). Decision: one Session over both engines
// rather than two sessions sharing a scheduler, because a front end then has one queue to poll, one
// id space, one place that knows where both models run, and nothing to wire up.
//
// Models: load_shape_model() / load_image_model() are jobs of their lane (ModelLoaded, then Done or
// Error naming the file and the fault); the previous model stays in use until the new one has
// loaded, and a job submitted meanwhile runs on the new model. Session::create(pipeline) and open()
// start with a shape model already loaded (the CLI and tests).
//
// Jobs: submit() (shape generation or, with JobOptions::tokens, decoding given tokens),
// submit_image(), submit_paint() (image lane), submit_texture(). Options are checked when the job
// runs (a bad option arrives as an Error event: a bad resolution fails before any token is
// generated). A job needing a model that is not loaded ends with an Error saying so.
//
// Cancellation and replacement, per lane: a new job cancels the lane's running job and replaces its
// queued one (which reports Cancelled without running); cancel(lane) cancels the lane's running job
// and queued jobs (loads are not cancelled: they cannot be interrupted); cancel() does so on every
// lane. The worker checks the job's cancel flag before every token, between stages, before every
// batch of occupancy queries and before every denoising step, so a cancel takes effect within one
// token step, one query batch or one denoising step. Every job reports exactly one terminal event.
// An exception (out of memory included) ends its job with an Error; the next job runs.
//
// Threads: every method may be called from any thread. With SessionOptions::on_event set, events
// are delivered by calling it on the lanes' worker threads (possibly concurrently from different
// lanes: it must be thread-safe, and must not wait on this Session) and nothing is queued;
// otherwise they are queued for poll()/wait_event(). The destructor cancels everything and joins
// the workers.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/mesh/cleanup.h"
#include "engine/mesh/mesh.h"
#include "engine/mesh/paint_views.h"
#include "engine/mesh/texture.h"
#include "engine/runtime/capabilities.h"
#include "engine/runtime/defaults.h"
#include "engine/runtime/events.h"

namespace tessera::shape {
class ShapePipeline;
}  // namespace tessera::shape

namespace tessera::runtime {

// The runtime's own option types, so a front end sees no model header. Their defaults are the
// product's (runtime/defaults.h): a default-constructed job is what every front end runs when
// the user gives no option. The Session hands them to the engines (engine_types_internal.h); the
// sampling settings are the engine's own type (core/sampling.h), handed over as they are.

struct GenerationOptions {
  // Greedy unless sampling.sample; seed, temperature, top-k, top-p and guidance (core/sampling.h).
  SamplingSettings sampling = kDefaultSampling;
  // v0.5 bounding box (x, y, z; proportions); none = (0, 0, 0). Ignored on v0.1 checkpoints,
  // which have no box token.
  std::optional<std::array<float, 3>> bbox;
  bool use_kv_cache = true;  // false: recompute the whole sequence per step (the baseline)
  bool use_graphs = true;    // CUDA: replay the recorded decode step; false: eager launches
  int64_t num_tokens = 0;    // 0: the model's num_latents; fewer gives a prefix
};

struct MeshOptions {
  // Lattice points per axis of the finest level, R = 2^k + 1 with k in [1, 10]; 0: the model's.
  int resolution = 0;
  // The coarse-to-fine search: its first lattice, 2^coarse_base + 1 per axis (0: the model's),
  // and the logit margin within which agreeing coarse cells are refined too (< 0: the model's).
  int coarse_base = 0;
  float near_surface_logit = -1.0f;
  mesh::CleanupOptions cleanup;
};

// Checks R = 2^k + 1 with k in [1, 10] and returns k; kInvalidArgument naming R otherwise.
Expected<int> resolution_base(int resolution);
// The number of tokens a shape job generates: `requested` when > 0, else the model's num_latents.
int64_t tokens_to_generate(int64_t requested, int64_t num_latents);

// The image engine's samplers.
// kLcm: latent consistency sampling (4-8 steps, guidance 1-2) for LCM-distilled weights (an
// LCM-LoRA); on other weights it gives blurred images.
enum class SamplerKind { kEuler, kEulerAncestral, kDpmpp2m, kLcm };
inline constexpr SamplerKind kImageSamplers[] = {SamplerKind::kEuler, SamplerKind::kEulerAncestral,
                                                 SamplerKind::kDpmpp2m, SamplerKind::kLcm};
const char* sampler_kind_name(SamplerKind kind);  // "euler", "euler_a", "dpmpp_2m", "lcm"
Expected<SamplerKind> parse_sampler(const std::string& name);

// The image engine's arithmetic. kAuto: bf16 for SD-size UNets where the CPU computes in bf16,
// f32 for small models; kBf16: bf16 where the CPU can, else f32.
enum class ImagePrecision { kAuto, kF32, kBf16 };

struct JobOptions {
  std::string prompt;            // UTF-8; "" is valid (the unconditional shape)
  GenerationOptions generation;  // sampling (seed, guidance...), bbox, KV cache, graphs, num_tokens
  MeshOptions mesh;              // final mesh: resolution (2^k + 1, 0: the model's), clean-up
  int64_t preview_every = 0;     // K: a PartialMesh every K tokens; 0: none
  int preview_resolution =
      kDefaultPreviewResolution;  // 2^k + 1, usually small (a preview costs a latent decode)
  // At most this fraction of the job's wall time goes to meshing previews, in (0, 1]; 1: no
  // limit. A preview starts only when the time previews took so far plus what the last one took
  // fits in it; a due preview that does not fit waits (CPU: previews are meshed beside the
  // decode, the newest prefix wins) or is skipped (device backends: meshed in the token loop).
  // No preview outlives the decode. 10 %: the bound on what previews may cost an object.
  double preview_budget = kDefaultPreviewBudget;
  // Decode these shape tokens instead of generating (1..num_latents ids in [0, codebook_size);
  // fewer are filled with the model's fill token). The prompt and generation options are then
  // unused.
  std::optional<std::vector<int32_t>> tokens;
  // With `tokens`: a replay of how they formed. Instead of the final mesh, the meshes of these
  // prefix lengths (each in 1..tokens->size()), in this order, at preview_resolution, meshed as the
  // live previews are: one PartialMeshEvent each (tokens = the prefix length; a prefix without
  // surface yet gives an empty mesh), then Done. Cancelling stops between two prefixes.
  std::vector<int64_t> replay_prefixes;
  // Candidates decoded together (1..kMaxVariations): candidate j samples with seed
  // generation.sampling.seed + j, so candidate j alone (variations 1, that seed) gives the same
  // tokens. More than one needs sampling on (greedy would give identical candidates). Events:
  // Token / PartialMesh / Stage / FinalMesh carry the candidate; one FinalMesh per candidate.
  int variations = 1;
};
inline constexpr int kMaxVariations = 8;

// The precision of a shape model's weights (ShapeModelOptions::weights).
//   kAuto  what suits the files: int8 when the shape GPT is stored in int8 (tessera quantize); bf16
//          when it is large (>= kAutoBf16Parameters: the released Cube 3D GPTs, whose decode and
//          occupancy queries are bound by bytes, as the diffusion engine's auto precision decides);
//          f32 otherwise (small models such as tessera-tiny keep the reference's exact numerics).
//   kF32   as stored (f16/bf16 files widened to f32).
//   kBF16  every model's matrices converted once to bf16 (half the bytes).
//   kInt8  the shape GPT's linear layers int8 (quantized at load unless stored so; CPU), the
//          other models (CLIP, shape decoder) bf16.
//   kFast  the quickest choice whose shapes hold, for artists iterating on prompts: on the CPU
//          kInt8 (a decode step reads half of bf16's bytes: 1.5-1.9x faster per token on AVX2 and
//          AVX-512; judged on tessera-tiny's 57 held-out and 91 first prompts, where int8 keeps
//          bf16's family match and passes every property check bf16 passes, while only ~81 % of
//          the tokens are the same: a near-tie flips to another shape of the same family;
//          bench/RESULTS.md, "int8 weights (CPU)"); on a GPU kBF16 (its int8 kernels are not
//          measured yet).
enum class ShapeWeights { kAuto, kF32, kBF16, kInt8, kFast };
inline constexpr int64_t kAutoBf16Parameters = 100'000'000;
// "auto", "f32", "bf16", "int8", "fast" -> ShapeWeights; kInvalidArgument naming the text
// otherwise.
Expected<ShapeWeights> parse_shape_weights(const std::string& name);
const char* shape_weights_name(ShapeWeights weights);
// What kAuto resolves to for the model directory `dir` (reads the GPT file's header only) and
// kFast on `device` (kAuto: the device probe_capabilities() picks); other choices come back as
// they are. Errors: the directory's (locate_model_dir, the GPT file).
Expected<ShapeWeights> resolve_shape_weights(const std::string& dir, ShapeWeights weights,
                                             DeviceChoice device = DeviceChoice::kCpu);

struct ShapeModelOptions {
  std::string path;  // a Cube 3D layout directory; "": the embedded default
  DeviceChoice device = DeviceChoice::kCpu;
  ShapeWeights weights = ShapeWeights::kAuto;
  // Weights used in place from their files leave resident memory between the phases that read
  // them (false keeps them; `bench generate --keep-pages` measures both).
  bool release_idle_pages = true;
  // The CLIP vocabulary for checkpoints that ship none ("": the bundled one).
  std::string clip_vocab_fallback;
};

// A LoRA file and its multiplier (engine/diffusion/lora.h has the formats).
struct LoraChoice {
  std::string path;
  float multiplier = 1.0f;
  bool operator==(const LoraChoice& o) const {
    return path == o.path && multiplier == o.multiplier;
  }
};

struct ImageModelOptions {
  std::string path;  // diffusers folder, CompVis .safetensors, or a folder with one; "": embedded
  DeviceChoice device = DeviceChoice::kCpu;
  bool bf16 = false;  // linear layers in bf16
  ImagePrecision precision = ImagePrecision::kAuto;
  std::string clip_vocab_fallback;  // "": the bundled CLIP vocabulary
  std::vector<LoraChoice> loras;    // merged into the weights at load
};
// "auto", "f32", "bf16" -> ImagePrecision; kInvalidArgument naming the text otherwise.
Expected<ImagePrecision> parse_precision(const std::string& name);

struct ImageJobOptions {
  std::string prompt;
  std::string negative_prompt;  // "" = unconditional
  // Pixels; 0: the init image's size rounded down to the model's size step, else the model's
  // default side (engine/runtime/image_inputs.h has the rules).
  int64_t width = 0, height = 0;
  int steps = kDefaultImageSteps;
  float guidance = kDefaultImageGuidance;
  SamplerKind sampler = SamplerKind::kEuler;
  uint64_t seed = 0;
  // Image-to-image: the picture to start from (any size: resized and said) and the share of the
  // steps that repaint it, in (0, 1].
  std::shared_ptr<const mesh::TextureImage> init_image;
  float strength = kDefaultImageStrength;
  // Inpainting (with init_image): white (>= 128, mean of the channels) = repaint, black = keep.
  std::shared_ptr<const mesh::TextureImage> mask;
  // LoRAs for this image, besides A1111 tags in the prompt (`<lora:NAME:M>`, removed from the
  // text, NAME looked up in lora_dir, else the user's loras folder; repeated names add up). When
  // the set differs from the loaded model's, the model is reloaded with it first (said in the
  // ImageEvent's notes).
  std::vector<LoraChoice> loras;
  std::string lora_dir;
  // ControlNet: the control image (a depth map: near = white, far = black; any size: resized and
  // said) and the ControlNet file or folder ("" with a control image: the image model's own depth
  // ControlNet, where it ships one). A ControlNet other than the loaded one is loaded first (said
  // in the ImageEvent's notes). Scale in [0, 2]; guess mode: engine/diffusion/pipeline.h.
  std::shared_ptr<const mesh::TextureImage> control_image;
  std::string control_model;
  float control_scale = kDefaultControlScale;
  bool control_guess_mode = false;
  // The tiny decoder (TAESD) file or folder to decode with instead of the VAE ("" = the VAE):
  // about 20x less decode work for a softer image. Loaded when another one is, let go by a job
  // without one.
  std::string tiny_decoder;
};

// Paint a mesh from views with the image model (docs/texture-painting.md): its UV atlas (kept
// when it has uvs, unless new_atlas), the views around it, each generated with the depth
// ControlNet and inpainted over what earlier views painted, baked into the texture.
struct PaintJobOptions {
  std::shared_ptr<const mesh::Mesh> mesh;  // not null, valid, with triangles
  // The prompt and how each view is made (steps, sampler, seed for the first view, LoRAs, the
  // ControlNet and its scale, the tiny decoder, the fast choice applied); its pictures and size
  // are the painter's own.
  ImageJobOptions image;
  mesh::ViewSetOptions views;
  int view_size = 0;  // pixels per side; 0: the image model's default size
  int texture_size = kDefaultPaintTextureSize;
  bool new_atlas = false;
  // A mesh of more triangles is simplified to this many first (quadric decimation, its uvs kept;
  // said in the notes); 0: no limit.
  int64_t max_triangles = kMaxPaintTriangles;
};

// A paint job's own rules, checked before any work (front ends before they load or generate; the
// job again): the texture size, no pictures of its own, check_image_job(), the view set, the view
// size. kInvalidArgument naming the option. The mesh is checked by the job.
Status check_paint_job(const PaintJobOptions& job);

struct TextureJobOptions {
  std::shared_ptr<const mesh::Mesh> mesh;           // not null, valid, with triangles
  std::shared_ptr<const mesh::TextureImage> image;  // not null
  mesh::ProjectionOptions projection;
};

// What a loaded shape model is (a snapshot).
struct ShapeModelInfo {
  std::string path;
  std::string backend;       // where it runs
  std::string backend_note;  // kAuto that ended on the CPU: why
  bool on_gpu = false;
  bool can_record_graphs = false;  // the backend records decode steps (CUDA graphs)
  int64_t num_latents = 0;         // tokens per shape
  int64_t codebook_size = 0;
  bool uses_bbox = false;      // v0.5: a bounding-box condition
  int default_resolution = 0;  // the final mesh lattice for resolution 0
  // The shape GPT's matrices as loaded: "f32", "bf16", or "int8" (quantized at load or stored so
  // by tessera quantize; the token table stays f32/bf16).
  std::string weights;
  int64_t gpt_weight_bytes = 0;  // bytes of weights one decode step reads (CubeGpt)
  int64_t resident_bytes = 0;    // the process's resident memory right after the load
  int32_t fill_token_id = 0;     // what completes a token prefix to num_latents
  int64_t decoder_codes = 0;     // ids a token file may hold: [0, decoder_codes)
  // Prompts the model is known to answer (from its model.json; empty when it has none): what a
  // front end offers a newcomer as examples.
  std::vector<std::string> example_prompts;
  // The files it was loaded from (checksums of batch manifests).
  std::string shape_gpt_file, shape_tokenizer_file;
};
struct ImageModelInfo {
  std::string path;
  std::vector<LoraChoice> loras;  // merged at load
  std::string layout;             // "compvis" / "diffusers"
  std::string backend;
  std::string backend_note;
  bool on_gpu = false;
  std::string precision;     // "f32", "bf16", "tf32"
  int64_t default_size = 0;  // pixels per side
  int64_t size_multiple = 0;
  std::string summary;  // UNet and VAE in one line
};

struct SessionOptions {
  // Called on a worker thread for every event instead of queueing it (may be empty).
  std::function<void(const Event&)> on_event;
};

class Session {
 public:
  // No model loaded yet (load them with load_*_model()).
  static std::unique_ptr<Session> create(SessionOptions options = {});
  // With a loaded shape pipeline (not null): for tests and benchmarks that build one themselves.
  static std::unique_ptr<Session> create(std::unique_ptr<shape::ShapePipeline> pipeline,
                                         SessionOptions options = {});
  // Loads the shape model synchronously (what the CLI wants: the error is the return value).
  static Expected<std::unique_ptr<Session>> open(const ShapeModelOptions& model,
                                                 SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Model loads, jobs of their lane (see above). Return the job id.
  uint64_t load_shape_model(ShapeModelOptions options);
  uint64_t load_image_model(ImageModelOptions options);

  uint64_t submit(JobOptions job);                 // shape lane
  uint64_t submit_image(ImageJobOptions job);      // image lane
  uint64_t submit_texture(TextureJobOptions job);  // texture lane
  uint64_t submit_paint(PaintJobOptions job);      // image lane
  void cancel();                                   // every lane
  void cancel(Lane lane);                          // one lane

  std::optional<Event> poll();  // next queued event, if any (never blocks)
  std::optional<Event> wait_event(std::chrono::milliseconds timeout);
  // Waits for job `id`'s events until its terminal event, calling `on_event` for each of them
  // (events of other jobs are dropped); returns the terminal event. For synchronous front ends (the
  // CLI) on a Session without on_event.
  Event wait_for(uint64_t id, const std::function<void(const Event&)>& on_event = {});
  // True when no job is running or queued on any lane (events may still wait in the queue).
  bool idle() const;

  // Snapshots of the loaded models (nullopt: none loaded).
  std::optional<ShapeModelInfo> shape_model() const;
  std::optional<ImageModelInfo> image_model() const;
  // Shortcuts for the shape model's facts (0 when none is loaded).
  int64_t num_latents() const;
  int64_t codebook_size() const;
  int default_resolution() const;
  // Checks shape tokens against the loaded shape model (1..num_latents ids, each in
  // [0, codebook_size)) without running anything; kInvalidArgument naming the first bad position,
  // kNotFound when no shape model is loaded.
  Status check_tokens(const std::vector<int32_t>& ids) const;
  // Test seam: called on the image worker after each denoising step's event was emitted, with the
  // step and the job's cancel flag (tests hold a job at a step until the front end has acted, so no
  // race between the worker's speed and the UI decides the outcome). Empty: none. Thread-safe;
  // takes effect from the next step.
  using ImageStepHook = std::function<void(int step, const std::atomic<bool>& cancel)>;
  void set_image_step_hook(ImageStepHook hook);
  // Whether image work waits for shape work now (both models on the same device).
  bool engines_share_device() const;
  // Memory in use (the device's when a model runs on the GPU).
  MemoryUse memory() const;

 private:
  struct Impl;  // engine/runtime/session_internal.h
  explicit Session(SessionOptions options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::runtime
