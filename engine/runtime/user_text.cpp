#include "engine/runtime/user_text.h"

#include <cstdint>
#include <cstdio>

#include "engine/runtime/session.h"

namespace tessera::runtime {

namespace {

constexpr const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed sequence at bytes[i] (1..4), or, when it is ill-formed, 0 with
// `*subpart` set to the length of its maximal ill-formed subpart (>= 1): the bytes one U+FFFD
// replaces (Unicode 15, section 3.9, table 3-7 and "U+FFFD Substitution of Maximal Subparts").
size_t sequence_length(std::string_view bytes, size_t i, size_t* subpart) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(bytes[k]); };
  const uint8_t lead = byte(i);
  *subpart = 1;
  if (lead < 0x80) return 1;
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead == 0xE0) {
    need = 3, lo = 0xA0;
  } else if (lead == 0xED) {
    need = 3, hi = 0x9F;  // no encoded surrogates
  } else if (lead >= 0xE1 && lead <= 0xEF) {
    need = 3;
  } else if (lead == 0xF0) {
    need = 4, lo = 0x90;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    need = 4;
  } else if (lead == 0xF4) {
    need = 4, hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;  // 80..C1, F5..FF: never a lead byte
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= bytes.size()) return 0;  // truncated: the subpart so far
    const uint8_t b = byte(i + k);
    const bool fits = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!fits) return 0;
    *subpart = k + 1;
  }
  return need;
}

bool is_line_space(uint8_t c) {
  return c == '\t' || c == '\n' || c == '\r';
}

// The repaired text and what was done; `keep_controls` leaves control characters alone.
CheckedText repair(std::string_view bytes, bool keep_controls) {
  CheckedText out;
  out.text.reserve(bytes.size());
  size_t bad_bytes = 0, first_bad = 0, controls = 0, first_control = 0;
  uint32_t first_control_code = 0;
  for (size_t i = 0; i < bytes.size();) {
    size_t subpart = 1;
    const size_t n = sequence_length(bytes, i, &subpart);
    if (n == 0) {
      if (bad_bytes == 0) first_bad = i;
      bad_bytes += subpart;
      out.text += kReplacement;
      i += subpart;
      continue;
    }
    const auto c = static_cast<uint8_t>(bytes[i]);
    // C0 and DEL (one byte), C1 (U+0080..U+009F: C2 80..C2 9F).
    const bool c0 = n == 1 && (c < 0x20 || c == 0x7F);
    const bool c1 = n == 2 && c == 0xC2 && static_cast<uint8_t>(bytes[i + 1]) <= 0x9F;
    if (!keep_controls && (c0 || c1)) {
      if (!(c0 && is_line_space(c))) {
        if (controls == 0) {
          first_control = i;
          first_control_code = c1 ? static_cast<uint8_t>(bytes[i + 1]) : c;
        }
        ++controls;
      }
      out.text += ' ';
    } else {
      out.text.append(bytes.substr(i, n));
    }
    i += n;
  }
  std::string repairs;
  if (bad_bytes > 0) {
    repairs = std::to_string(bad_bytes) + " invalid UTF-8 byte" + (bad_bytes > 1 ? "s" : "") +
              " (the first at byte " + std::to_string(first_bad) + ") replaced with U+FFFD";
  }
  if (controls > 0) {
    char code[16];
    std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(first_control_code));
    repairs += (repairs.empty() ? "" : "; ") + std::to_string(controls) + " control character" +
               (controls > 1 ? "s" : "") + " (the first at byte " + std::to_string(first_control) +
               ": " + code + ") replaced with " + (controls > 1 ? "spaces" : "a space");
  }
  out.repairs = std::move(repairs);
  return out;
}

}  // namespace

bool is_valid_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    size_t subpart = 1;
    const size_t n = sequence_length(bytes, i, &subpart);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

Expected<CheckedText> check_user_text(std::string_view field, std::string_view bytes,
                                      size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    return invalid_argument(std::string(field) + ": " + std::to_string(bytes.size()) +
                            " bytes of text; at most " + std::to_string(max_bytes) +
                            " are accepted (the text encoder reads only its first 77 tokens, "
                            "about 300 characters)");
  }
  return repair(bytes, /*keep_controls=*/false);
}

std::string display_path(std::string_view bytes) {
  if (is_valid_utf8(bytes)) return std::string(bytes);
  return repair(bytes, /*keep_controls=*/true).text;
}

namespace {
Status accept_field(const char* field, std::string* text, size_t max_bytes, TextNotes* notes) {
  TESSERA_ASSIGN_OR_RETURN(CheckedText checked, check_user_text(field, *text, max_bytes));
  if (checked.changed()) notes->push_back(std::string(field) + ": " + checked.repairs);
  *text = std::move(checked.text);
  return Status();
}
}  // namespace

Expected<TextNotes> accept_job_text(JobOptions* job) {
  TextNotes notes;
  TESSERA_RETURN_IF_ERROR(accept_field("prompt", &job->prompt, kMaxPromptBytes, &notes));
  return notes;
}

Expected<TextNotes> accept_job_text(ImageJobOptions* job) {
  TextNotes notes;
  TESSERA_RETURN_IF_ERROR(accept_field("prompt", &job->prompt, kMaxPromptBytes, &notes));
  TESSERA_RETURN_IF_ERROR(
      accept_field("negative prompt", &job->negative_prompt, kMaxPromptBytes, &notes));
  return notes;
}

}  // namespace tessera::runtime
