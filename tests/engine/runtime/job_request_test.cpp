// A job as JSON (engine/runtime/job_request.h): the fields over the defaults, every bad field
// named.
#include "engine/runtime/job_request.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::runtime {
namespace {

using nlohmann::json;

std::string error_of(const json& j, const std::set<std::string>& extra = {}) {
  auto r = parse_job_request(j, extra);
  return r.ok() ? std::string() : r.status().message();
}

TEST(JobRequestTest, FieldsOverTheDefaults) {
  auto bare = parse_job_request(json{{"prompt", "a chair"}});
  ASSERT_TRUE(bare.ok());
  const JobOptions greedy = bare->job();
  EXPECT_EQ(greedy.prompt, "a chair");
  EXPECT_FALSE(greedy.generation.sampler.sample);
  EXPECT_EQ(greedy.variations, 1);
  EXPECT_FLOAT_EQ(greedy.generation.guidance_scale, kDefaultGuidance);
  EXPECT_EQ(greedy.mesh.resolution, 0);
  auto full = parse_job_request(json{{"prompt", "a mug"},
                                     {"seed", 7},
                                     {"variations", 4},
                                     {"guidance", 2.5},
                                     {"top_p", 0.8},
                                     {"resolution", 65},
                                     {"name", "mug"}});
  ASSERT_TRUE(full.ok()) << full.status().message();
  const JobOptions job = full->job();
  EXPECT_TRUE(job.generation.sampler.sample);
  EXPECT_EQ(job.generation.sampler.seed, 7u);
  EXPECT_EQ(job.variations, 4);
  EXPECT_FLOAT_EQ(job.generation.guidance_scale, 2.5f);
  EXPECT_FLOAT_EQ(job.generation.sampler.top_p, 0.8f);
  EXPECT_EQ(job.mesh.resolution, 65);
  EXPECT_EQ(full->name, "mug");
  // Variations alone sample too (greedy would make identical candidates).
  EXPECT_TRUE(
      parse_job_request(json{{"prompt", "x"}, {"variations", 2}})->job().generation.sampler.sample);
}

TEST(JobRequestTest, EveryBadFieldIsNamed) {
  EXPECT_EQ(error_of(json::array()), "a job must be a JSON object");
  EXPECT_EQ(error_of(json{{"seed", 1}}), "\"prompt\" (a string) is required");
  EXPECT_EQ(error_of(json{{"prompt", 3}}), "\"prompt\" (a string) is required");
  EXPECT_NE(error_of(json{{"prompt", "x"}, {"promt", "y"}}).find("unknown key \"promt\""),
            std::string::npos);
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"format", "obj"}}, {"format"}), "");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"seed", -1}}), "\"seed\" must be an integer >= 0");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"variations", 9}}), "\"variations\" 9 is out of range");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"variations", 1.5}}),
            "\"variations\" must be an integer");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"guidance", "high"}}), "\"guidance\" must be a number");
  EXPECT_NE(error_of(json{{"prompt", "x"}, {"resolution", 64}}).find("\"resolution\""),
            std::string::npos);
  EXPECT_NE(error_of(json{{"prompt", "x"}, {"name", "../up"}}).find("plain file name"),
            std::string::npos);
  EXPECT_NE(error_of(json{{"prompt", "x"}, {"name", ".hidden"}}).find("plain file name"),
            std::string::npos);
  EXPECT_NE(error_of(json{{"prompt", "x"}, {"name", std::string(300, 'a')}}).find("\"name\""),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::runtime
