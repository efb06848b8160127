// The product's rules for the pictures an image job starts from (image-to-image's init image,
// inpainting's mask, ControlNet's control image), applied once here for every front end (CLI,
// studio, server, batch):
// - the image size: the job's width / height where given (one of them: the other keeps the init
//   image's aspect ratio), else the init image's size rounded down to the model's size multiple
//   (an SD user's img2img keeps the picture's size; shrunk, aspect kept, to at most twice the
//   model's default side squared), else the model's default side; a control image does not set
//   it (SD tools make the image at their size and fit the control image to it);
// - an init image, control image or mask of another size is resized to it (the images with an
//   area average when shrinking and bilinear when enlarging, the mask nearest-neighbour so it
//   stays black and white), and a note says so: resized and said, never refused;
// - the ControlNet: the job's, else the image model's own depth ControlNet (its card's
//   "controlnet_depth", default_control_net) when the job has a control image;
// - a mask is passed on as it is; the engine reads it (engine/diffusion/pipeline.h, mask).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/mesh/mesh.h"
#include "engine/runtime/session.h"

namespace tessera::runtime {

struct PreparedImageInputs {
  int64_t width = 0, height = 0;  // the image to make
  // The init image and the mask at that size (null when the job has none); shared with the job
  // when no resize was needed.
  std::shared_ptr<const mesh::TextureImage> init, mask, control;
  std::vector<std::string> notes;  // what was done to them ("init image resized from ...")
};

// `width` / `height`: the job's (0: not given). `multiple`: the model's size multiple; `side`: its
// default side. Errors (kInvalidArgument): an empty or inconsistent picture ("init image: 0x0"),
// a mask without an init image.
Expected<PreparedImageInputs> prepare_image_inputs(
    int64_t width, int64_t height, const std::shared_ptr<const mesh::TextureImage>& init,
    const std::shared_ptr<const mesh::TextureImage>& mask, int64_t multiple, int64_t side,
    const std::shared_ptr<const mesh::TextureImage>& control = nullptr);
// The depth ControlNet an image model ships (its card's "controlnet_depth",
// diffusion::model_card_control_net), for `model_path` (a folder or a file in one); "" when it has
// none.
Expected<std::string> default_control_net(const std::string& model_path);

// The job's own rules, checked before any work (the CLI before it loads a model, the image lane
// before it runs): a strength in (0, 1] when there is an init image, a mask only with one, a
// control scale in [0, 2], a ControlNet only with a control image.
// kInvalidArgument naming the field.
// `json_names`: the fields named as a JSON request spells them ("\"control_scale\"").
Status check_image_job(const ImageJobOptions& job, bool json_names = false);
// The LoRAs an image job asks for: its list plus the tags in its prompt (take_lora_tags over
// job.lora_dir, else default_lora_dir()), with `prompt` (may be null) set to the prompt without
// them.
Expected<std::vector<LoraChoice>> image_job_loras(const ImageJobOptions& job, std::string* prompt);

// A1111's LoRA tags taken out of `prompt`: every `<lora:NAME>` or `<lora:NAME:M>` (M a number,
// default 1) is removed (with one space next to it) and resolved in `dir`: DIR/NAME, else
// DIR/NAME.safetensors. Errors (kInvalidArgument / kNotFound) name the tag, the folder and what is
// wrong (a bad multiplier, no such file).
Expected<std::vector<LoraChoice>> take_lora_tags(std::string* prompt, const std::string& dir);
// Adds `more` to `loras`: a path already there gets the multipliers summed (A1111's rule for a
// repeated tag).
void add_loras(std::vector<LoraChoice>* loras, const std::vector<LoraChoice>& more);
// "FILE" or "FILE:M" as a LoRA choice (a Windows drive letter is not a multiplier).
Expected<LoraChoice> parse_lora_choice(const std::string& text);
// The "fast" choice on `job`: the LCM sampler, kFastImageSteps steps, guidance kFastImageGuidance,
// with the LCM-LoRA merged: one of the job's LoRAs whose file name has "lcm" in it, else
// `lora_dir`/kLcmLoraFile (added at multiplier 1). kNotFound saying where it looked when there is
// none (LCM sampling without it blurs). A `lora_dir`/kTinyDecoderFile beside it becomes the job's
// tiny decoder when the job names none.
Status apply_fast_choice(ImageJobOptions* job, const std::string& lora_dir);
// Where `<lora:NAME>` looks by default: the user's data folder's loras/.
std::string default_lora_dir();

}  // namespace tessera::runtime
