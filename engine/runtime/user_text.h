// The product's one rule for text that people give: prompts, negative prompts, names, preset
// names, lines of a batch file, text restored from a file's metadata. Every front end (CLI,
// batch, studio, server) passes such text through here before any work starts, and the Session
// applies it again to every job it is given, so nothing that reaches the engine, a written file's
// metadata (JSON in GLB / FBX / OBJ / 3MF, batch manifests) or a log is anything but valid text.
//
// The rule (decided once, here):
//   - Invalid UTF-8 is repaired, not refused: each maximal ill-formed subsequence (a stray
//     continuation byte, a truncated sequence, an overlong form, an encoded surrogate, a code point
//     past U+10FFFF) becomes U+FFFD, as Unicode's "substitution of maximal subparts" practice
//     says, and the repair is reported (CheckedText::repairs). Text pasted from a file in another
//     encoding still makes its shape, and the file records exactly the text the model read.
//   - Control characters (C0 including NUL, DEL, C1) become a space, and are reported: a prompt is
//     one line of words, and a NUL would cut it short wherever a C string carries it.
//   - Text longer than its field's limit (kMaxPromptBytes, kMaxNameBytes) is refused with a
//     clear error before any work: the text encoder reads only its first 77 tokens (about 300
//     characters), so 4 KiB of text is a mistake (a pasted file), not a prompt.
//   - Nothing else changes: emoji, accents, any script stay as given; "" stays "" (the
//     unconditional shape, where a field allows it).
// File system paths are not user text: they keep the bytes the file system needs; display_path()
// is how a path is shown or stored in JSON.
//
// Threads: every function is pure and thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::runtime {

inline constexpr size_t kMaxPromptBytes = 4096;  // prompts, negative prompts
inline constexpr size_t kMaxNameBytes = 255;     // names, preset names (one file name's worth)

struct CheckedText {
  std::string text;  // valid UTF-8 without control characters
  // What was repaired, one line, "" when `text` is the input unchanged, e.g. "2 invalid UTF-8
  // bytes (the first at byte 8) replaced with U+FFFD".
  std::string repairs;
  bool changed() const { return !repairs.empty(); }
};

// Applies the rule to `bytes`, a value of the field named `field` ("prompt", "--prompt",
// "PROMPTS:3"...). kInvalidArgument naming the field, its length and the limit when it is longer
// than `max_bytes`.
Expected<CheckedText> check_user_text(std::string_view field, std::string_view bytes,
                                      size_t max_bytes = kMaxPromptBytes);

// True when `bytes` is well-formed UTF-8 (the same definition check_user_text repairs against).
bool is_valid_utf8(std::string_view bytes);

// `bytes` with ill-formed UTF-8 replaced by U+FFFD (control characters kept): how a path or any
// other byte string is printed or stored in JSON. Never fails.
std::string display_path(std::string_view bytes);

// "field: repairs" lines for the front end to show (one per repaired field).
using TextNotes = std::vector<std::string>;

struct JobOptions;
struct ImageJobOptions;
// The rule applied to every text field of a job, in place: the notes of what was repaired, or the
// first field that is refused (the job must then not run).
Expected<TextNotes> accept_job_text(JobOptions* job);
Expected<TextNotes> accept_job_text(ImageJobOptions* job);

}  // namespace tessera::runtime
