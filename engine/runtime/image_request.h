// An image job as a request spells it in JSON: the body of `tessera serve`'s POST /v1/jobs with
// "kind": "image". The same fields and rules as `tessera image`, each checked, and an error that
// names the field; any key not known is an error.
//
//   {"kind": "image", "prompt": "a red chair", "negative_prompt": "", "steps": 20,
//    "guidance": 7.5, "sampler": "euler", "seed": 1, "width": 512, "height": 512,
//    "init_image": "<PNG, base64>", "strength": 0.6, "mask": "<PNG, base64>",
//    "control_image": "<PNG, base64>", "control_model": "/models/control_depth.safetensors",
//    "control_scale": 1, "control_guess": false,
//    "loras": ["style.safetensors:0.8"], "lora_dir": "/models/loras", "fast": false}
//
// Only "prompt" is required (it may hold <lora:NAME:M> tags). Pictures are PNG files in base64
// (any size: the image lane resizes them and says so), or, in a `tessera batch` file, PNG file
// paths (relative ones to the batch file's folder). Model files (control_model, loras,
// lora_dir) are paths on the machine that runs the job. "fast" is apply_fast_choice.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/runtime/session.h"

namespace tessera::runtime {

// The keys parse_image_request knows ("kind" among them).
const std::set<std::string>& image_request_keys();

// Reads `j` (an object). Errors (kInvalidArgument) name the field: not an object, an unknown key,
// "prompt" missing or not a string, a field of the wrong type or out of range, a picture that is
// not base64 or not a PNG, a LoRA that is not FILE or FILE:M, the job rules of check_image_job;
// kNotFound for "fast" without an LCM-LoRA (where it looked).
// `picture_dir` non-empty: pictures are file paths, relative ones under that folder (batch files).
Expected<ImageJobOptions> parse_image_request(const nlohmann::json& j,
                                              const std::string& picture_dir = "");

// A paint job as a request spells it (`tessera serve`'s "kind": "paint"): the mesh as a file's
// bytes in base64 with its format, the image fields of an image job that apply to painting
// (prompt, negative_prompt, steps, guidance, sampler, seed, loras, lora_dir, fast, control_model,
// control_scale, tiny_decoder) and the painter's own:
//
//   {"kind": "paint", "mesh": "<GLB, base64>", "mesh_format": "glb", "prompt": "a red chair",
//    "views": {"ring": 4, "elevation": 15, "top": true, "bottom": true}, "view_size": 512,
//    "texture_size": 1024, "new_atlas": false, "fast": true}
//
// "mesh" and "prompt" are required; "mesh_format" is glb (default), fbx or obj (an OBJ without its
// MTL: the mesh's own uvs, no texture). `extra_keys` are accepted and left to the caller (the
// server's output format and export fields). Errors (kInvalidArgument) name the field: an unknown
// key, the image job's pictures or size (the painter makes its own), a mesh that is not base64 or
// does not parse (the reader's message), one without triangles, and check_paint_job's rules.
const std::set<std::string>& paint_request_keys();
Expected<PaintJobOptions> parse_paint_request(const nlohmann::json& j,
                                              const std::set<std::string>& extra_keys = {});

}  // namespace tessera::runtime
