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
  EXPECT_FALSE(greedy.generation.sampling.sample);
  EXPECT_EQ(greedy.variations, 1);
  EXPECT_FLOAT_EQ(greedy.generation.sampling.guidance, kDefaultSampling.guidance);
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
  EXPECT_TRUE(job.generation.sampling.sample);
  EXPECT_EQ(job.generation.sampling.seed, 7u);
  EXPECT_EQ(job.variations, 4);
  EXPECT_FLOAT_EQ(job.generation.sampling.guidance, 2.5f);
  EXPECT_FLOAT_EQ(job.generation.sampling.top_p, 0.8f);
  EXPECT_EQ(job.mesh.resolution, 65);
  EXPECT_EQ(full->name, "mug");
  // Variations alone sample too (greedy would make identical candidates).
  EXPECT_TRUE(parse_job_request(json{{"prompt", "x"}, {"variations", 2}})
                  ->job()
                  .generation.sampling.sample);
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
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"top_k", 2.5}}), "\"top_k\" must be an integer");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"top_k", 18446744073709551615u}}),
            "\"top_k\" must be an integer");
  EXPECT_NE(error_of(json{{"prompt", "x"}, {"resolution", 64}}).find("\"resolution\""),
            std::string::npos);
  EXPECT_NE(error_of(json{{"prompt", "x"}, {"name", "../up"}}).find("plain file name"),
            std::string::npos);
  EXPECT_NE(error_of(json{{"prompt", "x"}, {"name", ".hidden"}}).find("plain file name"),
            std::string::npos);
  EXPECT_NE(error_of(json{{"prompt", "x"}, {"name", std::string(300, 'a')}}).find("\"name\""),
            std::string::npos);
}

// The range of the sampling fields is check_sampling's (core/sampling.h): the same message, one
// per bad field, as every other door gives.
TEST(JobRequestTest, SamplingRangesAreTheOneCheck) {
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"top_p", 1.5}}), "top_p: 1.5 is outside (0, 1]");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"top_p", 0}}), "top_p: 0 is outside (0, 1]");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"temperature", 0}}),
            "temperature: 0 is outside (0, inf)");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"temperature", 1e300}}),
            "temperature: inf is outside (0, inf)");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"top_k", -3}}), "top_k: -3 is outside [0, inf)");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"guidance", -0.5}}),
            "guidance: -0.5 is outside [0, inf)");
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"top_p", 2}, {"temperature", -1}}),
            "temperature: -1 is outside (0, inf); top_p: 2 is outside (0, 1]");
  SamplingSettings bad = kDefaultSampling;
  bad.top_p = 1.5f;
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"top_p", 1.5}}), check_sampling(bad).message());
  // The edges the ranges keep.
  EXPECT_EQ(error_of(json{{"prompt", "x"}, {"top_p", 1}, {"top_k", 0}, {"guidance", 0}}), "");
}

// Over a base (the batch's command line): the fields given replace the base's, the rest stay, and
// a base that samples keeps sampling.
TEST(JobRequestTest, FieldsOverABase) {
  JobRequest base;
  base.variations = 2;
  base.sampling.sample = true;
  base.sampling.seed = 9;
  base.sampling.temperature = 0.5f;
  base.resolution = 33;
  auto r = parse_job_request(json{{"prompt", "x"}, {"top_p", 0.7}}, {}, base);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->variations, 2);
  EXPECT_EQ(r->resolution, 33);
  EXPECT_TRUE(r->sampling.sample);
  EXPECT_EQ(r->sampling.seed, 9u);
  EXPECT_FALSE(r->has_seed);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.7f);
  EXPECT_FLOAT_EQ(r->sampling.guidance, kDefaultSampling.guidance);
}

}  // namespace
}  // namespace tessera::runtime
