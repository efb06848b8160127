// The product's text rule (engine/runtime/user_text.h): invalid UTF-8 repaired by maximal subparts,
// control characters to spaces, over-long text refused, and the rule applied at the Session's
// door and in everything that writes metadata.
#include <gtest/gtest.h>

#include <string>

#include "engine/runtime/provenance.h"
#include "engine/runtime/session.h"
#include "engine/runtime/user_text.h"

namespace tessera::runtime {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string repaired(const std::string& bytes) {
  auto checked = check_user_text("prompt", bytes);
  EXPECT_TRUE(checked.ok()) << checked.status().to_string();
  return checked.ok() ? checked->text : std::string();
}

TEST(UserText, ValidTextIsUnchanged) {
  for (const std::string& text :
       {std::string(), std::string("a torus"), std::string("caf\xc3\xa9 \xe6\x9d\xaf"),
        std::string("\xf0\x9f\x90\xb1\xf0\x9f\x8d\xa9"), std::string("\xf4\x8f\xbf\xbf"),
        std::string("\xed\x9f\xbf\xee\x80\x80")}) {
    auto checked = check_user_text("prompt", text);
    ASSERT_TRUE(checked.ok());
    EXPECT_EQ(checked->text, text);
    EXPECT_FALSE(checked->changed()) << checked->repairs;
    EXPECT_TRUE(is_valid_utf8(text));
  }
}

TEST(UserText, TheIssuesPromptIsRepairedAndSaysWhere) {
  auto checked = check_user_text("--prompt", "a torus \xff\xfe caf\xc3\xa9 \xf0\x9f\x90\xb1");
  ASSERT_TRUE(checked.ok());
  EXPECT_EQ(checked->text, "a torus " + kFffd + kFffd + " caf\xc3\xa9 \xf0\x9f\x90\xb1");
  EXPECT_EQ(checked->repairs, "2 invalid UTF-8 bytes (the first at byte 8) replaced with U+FFFD");
  EXPECT_TRUE(is_valid_utf8(checked->text));
}

// Unicode's "substitution of maximal subparts" (the examples of Unicode 15 section 3.9).
TEST(UserText, MaximalSubpartsEachBecomeOneReplacement) {
  EXPECT_EQ(repaired("\xc0\xaf"), kFffd + kFffd);              // overlong: C0 never leads
  EXPECT_EQ(repaired("\xe0\x80\xaf"), kFffd + kFffd + kFffd);  // E0 needs A0..BF next
  EXPECT_EQ(repaired("\xed\xa0\x80"), kFffd + kFffd + kFffd);  // a surrogate
  EXPECT_EQ(repaired("\xf4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // past U+10FFFF
  EXPECT_EQ(repaired("\xe2\x82"), kFffd);                                  // truncated: one subpart
  EXPECT_EQ(repaired("\xf0\x9f\x90"), kFffd);
  EXPECT_EQ(repaired("\xe2\x82x"), kFffd + "x");
  EXPECT_EQ(repaired("\x80\xbf"), kFffd + kFffd);  // stray continuations
  EXPECT_EQ(repaired("a\xf8\x88\x80\x80\x80z"), "a" + kFffd + kFffd + kFffd + kFffd + kFffd + "z");
  EXPECT_EQ(repaired("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
}

TEST(UserText, ControlCharactersBecomeSpacesAndAreReported) {
  auto checked = check_user_text("prompt", std::string("a\0mug\x1b[1m\x7f\xc2\x85x", 13));
  ASSERT_TRUE(checked.ok());
  EXPECT_EQ(checked->text, "a mug [1m  x");
  EXPECT_NE(checked->repairs.find("4 control characters (the first at byte 1: U+0000)"),
            std::string::npos)
      << checked->repairs;
  // Line breaks and tabs are whitespace: spaces, not reported (the text encoder reads them so).
  auto lines = check_user_text("prompt", "a\tred\r\nchair");
  ASSERT_TRUE(lines.ok());
  EXPECT_EQ(lines->text, "a red  chair");
  EXPECT_FALSE(lines->changed());
}

TEST(UserText, TooLongIsRefusedNamingTheField) {
  const std::string big(100 * 1024, 'a');
  auto checked = check_user_text("--prompt", big);
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(checked.status().message().find("--prompt: 102400 bytes"), std::string::npos)
      << checked.status().message();
  EXPECT_NE(checked.status().message().find("4096"), std::string::npos);
  EXPECT_TRUE(check_user_text("prompt", std::string(kMaxPromptBytes, 'a')).ok());
  EXPECT_FALSE(check_user_text("\"name\"", std::string(300, 'n'), kMaxNameBytes).ok());
}

TEST(UserText, RepairIsIdempotentOnAnyBytes) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes;
    for (int i = 0; i < 24; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      bytes += static_cast<char>(state >> 56);
    }
    auto once = check_user_text("prompt", bytes);
    ASSERT_TRUE(once.ok());
    ASSERT_TRUE(is_valid_utf8(once->text));
    auto twice = check_user_text("prompt", once->text);
    ASSERT_TRUE(twice.ok());
    EXPECT_EQ(twice->text, once->text);
    EXPECT_FALSE(twice->changed());
    // Paths keep their control characters but become valid text.
    EXPECT_TRUE(is_valid_utf8(display_path(bytes)));
  }
}

TEST(UserText, JobTextAndMetadataPassTheRule) {
  JobOptions job;
  job.prompt = "a torus \xff";
  auto notes = accept_job_text(&job);
  ASSERT_TRUE(notes.ok());
  ASSERT_EQ(notes->size(), 1u);
  EXPECT_EQ(notes->front().rfind("prompt: 1 invalid UTF-8 byte", 0), 0u) << notes->front();
  EXPECT_EQ(job.prompt, "a torus " + kFffd);

  ImageJobOptions image;
  image.negative_prompt = std::string(5000, 'x');
  auto refused = accept_job_text(&image);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("negative prompt"), std::string::npos);

  // A front end that skipped the rule still writes valid metadata (dump() would throw otherwise).
  JobOptions raw;
  raw.prompt = "bad \xfe";
  const nlohmann::json j = shape_settings_json(raw, 0, 65, "model-\xff", "00");
  EXPECT_NO_THROW((void)j.dump());
  EXPECT_EQ(j["prompt"], "bad " + kFffd);

  // Restored text passes it too.
  auto restored = restored_settings(nlohmann::json{{"prompt", std::string("a\x01mug")}}, "f.glb");
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->prompt, "a mug");
  EXPECT_EQ(restored->notes.size(), 1u);
  auto too_long = restored_settings(nlohmann::json{{"prompt", std::string(9000, 'a')}}, "f.glb");
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("f.glb"), std::string::npos);
}

// The door: whatever a front end submits, the Session applies the rule before any work.
TEST(UserText, SessionRefusesOrRepairsBeforeAnyWork) {
  auto session = Session::open(ShapeModelOptions{});
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  JobOptions job;
  job.prompt = std::string(kMaxPromptBytes + 1, 'a');
  int tokens = 0;
  Event end = (*session)->wait_for((*session)->submit(job), [&](const Event& e) {
    if (std::holds_alternative<TokenEvent>(e.payload)) ++tokens;
  });
  const auto* error = std::get_if<ErrorEvent>(&end.payload);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(error->status.message().find("prompt"), std::string::npos);
  EXPECT_EQ(tokens, 0);

  job.prompt = std::string("a torus \xff\xfe\0", 11);
  job.generation.num_tokens = 4;
  job.mesh.resolution = 9;
  int meshes = 0;
  end = (*session)->wait_for((*session)->submit(job), [&](const Event& e) {
    if (std::holds_alternative<FinalMeshEvent>(e.payload)) ++meshes;
  });
  EXPECT_TRUE(std::holds_alternative<DoneEvent>(end.payload));
  EXPECT_EQ(meshes, 1);
}

}  // namespace
}  // namespace tessera::runtime
