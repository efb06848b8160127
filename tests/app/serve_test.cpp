// tessera serve (app/cli/cmd_serve.cpp), started by each test as a user would start it and talked
// to over real HTTP (cpp-httplib's client): jobs end to end with their event stream and result
// files, every kind of bad request answered with a JSON error naming the field, limits, cancel, a
// client that leaves mid-stream, the token when listening beyond loopback, and a restart that says
// which jobs it dropped.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "core/mapped_file.h"
#include "core/png.h"
#include "engine/mesh/export.h"
#include "engine/mesh/import.h"
#include "engine/mesh/metadata.h"
#include "engine/runtime/image_request.h"
#include "engine/runtime/job_request.h"
#include "tests/support/serve_process.h"
#include "tests/support/test_meshes.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ServeProcess;

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-serve-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

json post_job(httplib::Client& c, const json& body, int* status = nullptr) {
  auto res = c.Post("/v1/jobs", body.dump(), "application/json");
  if (!res) return json{{"transport", httplib::to_string(res.error())}};
  if (status != nullptr) *status = res->status;
  return json::parse(res->body, nullptr, false);
}

// The data lines of a finished job's event stream.
std::vector<json> events_of(httplib::Client& c, uint64_t id) {
  std::string body;
  auto res = c.Get("/v1/jobs/" + std::to_string(id) + "/events", [&](const char* data, size_t n) {
    body.append(data, n);
    return true;
  });
  std::vector<json> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) == 0) out.push_back(json::parse(line.substr(6), nullptr, false));
  }
  return out;
}

std::string decode64(const std::string& s) {
  std::string out;
  int val = 0, bits = -8;
  for (char ch : s) {
    const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char* p = std::strchr(t, ch);
    if (ch == '=' || p == nullptr) break;
    val = (val << 6) + static_cast<int>(p - t);
    bits += 6;
    if (bits >= 0) {
      out += static_cast<char>((val >> bits) & 0xFF);
      bits -= 8;
    }
  }
  return out;
}

TEST_F(ServeTest, AJobStreamsEveryTokenPreviewAndMeshThenItsFiles) {
  ServeProcess server(dir_, {});
  ASSERT_GT(server.port(), 0) << server.err();
  auto c = server.client();
  auto health = c.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(c.Get("/readyz")->status, 200);
  const json models = json::parse(c.Get("/v1/models")->body);
  EXPECT_FALSE(models["loaded"].is_null());
  EXPECT_GE(models["known"].size(), 3u);

  int status = 0;
  const json accepted = post_job(
      c, {{"prompt", "a chair"}, {"variations", 2}, {"seed", 5}, {"resolution", 33}}, &status);
  ASSERT_EQ(status, 202) << accepted.dump();
  const uint64_t id = accepted["id"];
  const std::vector<json> events = events_of(c, id);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front()["type"], "queued");
  EXPECT_EQ(events.back()["type"], "done");
  int tokens[2] = {0, 0}, meshes = 0, previews = 0;
  for (const json& e : events) {
    if (e["type"] == "token") ++tokens[e["candidate"].get<int>()];
    if (e["type"] == "preview" || e["type"] == "mesh") {
      const std::string bytes = decode64(e["mesh"].get<std::string>());
      ASSERT_GE(bytes.size(), 12u);
      EXPECT_EQ(bytes.substr(0, 4), "TSM1");
      uint32_t v = 0, t = 0;
      std::memcpy(&v, bytes.data() + 4, 4);
      std::memcpy(&t, bytes.data() + 8, 4);
      EXPECT_EQ(bytes.size(), 12u + 12u * v + 12u * t);
      if (e["type"] == "mesh") {
        ++meshes;
        EXPECT_EQ(e["seed"].get<uint64_t>(), 5u + e["candidate"].get<uint64_t>());
        EXPECT_EQ(static_cast<int64_t>(t), e["triangles"].get<int64_t>());
      } else {
        ++previews;
      }
    }
  }
  EXPECT_EQ(tokens[0], 64);
  EXPECT_EQ(tokens[1], 64);
  EXPECT_EQ(meshes, 2);
  EXPECT_GE(previews, 1);
  const json job = json::parse(c.Get("/v1/jobs/" + std::to_string(id))->body);
  EXPECT_EQ(job["state"], "done");
  // The result as a file: the bytes the server wrote, a mesh with the prompt in its metadata.
  auto result = c.Get("/v1/jobs/" + std::to_string(id) + "/result?candidate=1");
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200);
  const fs::path saved = dir_ / "fetched.glb";
  std::ofstream(saved, std::ios::binary) << result->body;
  auto read = mesh::import_mesh_file(saved.string());
  ASSERT_TRUE(read.ok()) << read.status().message();
  auto meta = mesh::read_metadata(saved.string());
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ((*meta)["prompt"], "a chair");
  EXPECT_EQ(c.Get("/v1/jobs/" + std::to_string(id) + "/result?candidate=5")->status, 404);
  // The command line's export options: a Roblox FBX, 2 m tall, its preset in the file's record.
  const uint64_t fbx = post_job(c,
                                {{"prompt", "a chair"},
                                 {"resolution", 33},
                                 {"format", "fbx"},
                                 {"preset", "roblox"},
                                 {"height", 2.0}},
                                &status)["id"];
  ASSERT_EQ(status, 202);
  ASSERT_EQ(events_of(c, fbx).back()["type"], "done");
  auto fbx_file = c.Get("/v1/jobs/" + std::to_string(fbx) + "/result");
  ASSERT_TRUE(fbx_file && fbx_file->status == 200);
  std::ofstream(dir_ / "roblox.fbx", std::ios::binary) << fbx_file->body;
  auto fbx_meta = mesh::read_metadata((dir_ / "roblox.fbx").string());
  ASSERT_TRUE(fbx_meta.ok()) << fbx_meta.status().message();
  EXPECT_EQ((*fbx_meta)["export"].value("preset", ""), "roblox") << fbx_meta->dump();
  // Metrics in Prometheus' text format.
  const std::string metrics = c.Get("/metrics")->body;
  EXPECT_NE(metrics.find("tessera_jobs{state=\"done\"} 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tessera_queue_length 0"), std::string::npos);
}

// A PNG of `w` x `h` (a colour ramp), in base64.
std::string ramp_png_base64(int w, int h) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3));
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 7) % 251);
  return encode_base64(encode_png(rgb.data(), w, h, 3).value());
}

// A few hundred bytes whose header claims 50000 x 40000 pixels (refused before decoding).
std::string huge_png_base64() {
  std::vector<uint8_t> rgb(8 * 8 * 3, 0);
  std::string png = encode_png(rgb.data(), 8, 8, 3).value();
  const uint32_t w = 50000, h = 40000;
  for (int b = 0; b < 4; ++b) {
    png[16 + b] = static_cast<char>(w >> (24 - 8 * b));
    png[20 + b] = static_cast<char>(h >> (24 - 8 * b));
  }
  return encode_base64(png);
}

TEST_F(ServeTest, ImageJobsStreamTheirStepsAndGiveAPngWithItsSettings) {
  ServeProcess server(dir_, {});
  ASSERT_GT(server.port(), 0) << server.err();
  auto c = server.client();
  int status = 0;
  // Image-to-image from a picture of another size (resized, said), on the embedded image model.
  const json accepted = post_job(c,
                                 {{"kind", "image"},
                                  {"prompt", "a red torus"},
                                  {"width", 64},
                                  {"height", 64},
                                  {"steps", 4},
                                  {"seed", 3},
                                  {"init_image", ramp_png_base64(40, 40)},
                                  {"strength", 0.5}},
                                 &status);
  ASSERT_EQ(status, 202) << accepted.dump();
  const uint64_t id = accepted["id"];
  const std::vector<json> events = events_of(c, id);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["type"], "done") << events.back().dump();
  int steps = 0;
  json image;
  for (const json& e : events) {
    if (e["type"] == "step") ++steps;
    if (e["type"] == "image") image = e;
  }
  EXPECT_EQ(steps, 2);  // the last floor(4 x 0.5)
  ASSERT_FALSE(image.is_null());
  EXPECT_EQ(image["seed"], 3);
  EXPECT_EQ(image["width"], 64);
  EXPECT_NE(image["notes"].dump().find("resized from 40x40"), std::string::npos) << image.dump();
  auto result = c.Get(image["result"].get<std::string>());
  ASSERT_TRUE(result && result->status == 200);
  auto png = decode_png(result->body.data(), result->body.size(), 3, "result");
  ASSERT_TRUE(png.ok()) << png.status().message();
  EXPECT_EQ(png->width, 64);
  auto text = read_png_text(result->body, "result");
  ASSERT_TRUE(text.ok());
  std::string parameters;
  for (const auto& [k, v] : *text) {
    if (k == "parameters") parameters = v;
  }
  EXPECT_NE(parameters.find("a red torus"), std::string::npos) << parameters;
  EXPECT_NE(parameters.find("Denoising strength: 0.5"), std::string::npos) << parameters;
  // The job list keeps the request without the picture's bytes.
  const json listed = json::parse(c.Get("/v1/jobs/" + std::to_string(id))->body);
  EXPECT_EQ(listed["state"], "done");
  EXPECT_EQ(listed.dump().find("iVBOR"), std::string::npos) << "PNG bytes in the job list";

  // Bad image requests name the field; the server goes on.
  for (const auto& [body, field] : std::vector<std::pair<json, std::string>>{
           {{{"kind", "image"}, {"prompt", "x"}, {"steps", 0}}, "steps"},
           {{{"kind", "image"}, {"prompt", "x"}, {"init_image", "not base64!"}}, "init_image"},
           {{{"kind", "image"}, {"prompt", "x"}, {"init_image", "aGVsbG8="}}, "init_image"},
           {{{"kind", "image"}, {"prompt", "x"}, {"mask", ramp_png_base64(8, 8)}}, "mask"},
           {{{"kind", "image"}, {"prompt", "x"}, {"init_image", huge_png_base64()}}, "init_image"},
           {{{"kind", "image"}, {"prompt", "x"}, {"resolution", 33}}, "resolution"},
           {{{"kind", "image"}, {"prompt", "x"}, {"control_scale", 5}}, "control_scale"},
           {{{"kind", "image"}, {"prompt", "x"}, {"tiny_decoder", 3}}, "tiny_decoder"},
           {{{"kind", "picture"}, {"prompt", "x"}}, "kind"}}) {
    const json refused = post_job(c, body, &status);
    EXPECT_EQ(status, 400) << body.dump();
    if (!field.empty()) {
      EXPECT_EQ(refused["field"], field) << refused.dump();
    }
  }
  // A ControlNet the server cannot read fails the job with the file named.
  const uint64_t bad = post_job(c,
                                {{"kind", "image"},
                                 {"prompt", "x"},
                                 {"steps", 1},
                                 {"control_image", ramp_png_base64(64, 64)},
                                 {"control_model", (dir_ / "nope.safetensors").string()}},
                                &status)["id"];
  ASSERT_EQ(status, 202);
  const std::vector<json> failed = events_of(c, bad);
  ASSERT_FALSE(failed.empty());
  EXPECT_NE(failed.back().dump().find("nope.safetensors"), std::string::npos)
      << failed.back().dump();
  // So does a tiny decoder made for other latents (the embedded model's VAE is not x8).
  const uint64_t tiny =
      post_job(c,
               {{"kind", "image"},
                {"prompt", "x"},
                {"steps", 1},
                {"tiny_decoder", std::string(TESSERA_SOURCE_DIR) +
                                     "/tests/fixtures/diffusion/taesd/taesd_decoder.safetensors"}},
               &status)["id"];
  ASSERT_EQ(status, 202);
  const std::vector<json> tiny_failed = events_of(c, tiny);
  ASSERT_FALSE(tiny_failed.empty());
  EXPECT_NE(tiny_failed.back().dump().find("x8"), std::string::npos) << tiny_failed.back().dump();
  // Shape jobs still run after image jobs.
  const uint64_t shape = post_job(c, {{"prompt", "a chair"}, {"resolution", 17}}, &status)["id"];
  ASSERT_EQ(status, 202);
  EXPECT_EQ(events_of(c, shape).back()["type"], "done");
}

// A paint job: a GLB sent in base64, an event per view, the painted mesh as an FBX that carries
// its texture (embedded) and the paint record, through the job's preset; bad paint requests name
// the field.
TEST_F(ServeTest, PaintJobsStreamAViewEventEachAndGiveTheTexturedMesh) {
  ServeProcess server(dir_, {});
  ASSERT_GT(server.port(), 0) << server.err();
  auto c = server.client();
  auto glb = mesh::to_glb(test::ellipsoid(16, 32, {1.0, 0.7, 0.9}));
  ASSERT_TRUE(glb.ok());
  const std::string mesh64 = encode_base64(*glb);
  int status = 0;
  const json accepted = post_job(c,
                                 {{"kind", "paint"},
                                  {"mesh", mesh64},
                                  {"prompt", "a blue egg"},
                                  {"steps", 2},
                                  {"seed", 5},
                                  {"views", {{"ring", 2}, {"bottom", false}}},
                                  {"view_size", 64},
                                  {"format", "fbx"},
                                  {"preset", "unity"}},
                                 &status);
  ASSERT_EQ(status, 202) << accepted.dump();
  const uint64_t id = accepted["id"];
  const std::vector<json> events = events_of(c, id);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["type"], "done") << events.back().dump();
  std::vector<std::string> views;
  json painted;
  for (const json& e : events) {
    if (e["type"] == "view") {
      views.push_back(e["name"]);
      EXPECT_EQ(e["views"], 3);
      EXPECT_GT(e["ms"]["generate"].get<double>(), 0.0);
    }
    if (e["type"] == "painted") painted = e;
  }
  EXPECT_EQ(views, (std::vector<std::string>{"front", "back", "top"}));
  ASSERT_FALSE(painted.is_null()) << events.back().dump();
  EXPECT_GT(painted["coverage"].get<double>(), 0.5);
  EXPECT_TRUE(painted["seam_error"].contains("p95"));
  EXPECT_EQ(painted["texture"][0], 1024);
  auto result = c.Get(painted["result"].get<std::string>());
  ASSERT_TRUE(result && result->status == 200);
  const std::string file = (dir_ / "painted.fbx").string();
  ASSERT_TRUE(write_file_atomic(file, result->body.data(), result->body.size()).ok());
  auto m = mesh::import_mesh_file(file);  // no PNG beside it: the embedded texture
  ASSERT_TRUE(m.ok()) << m.status().message();
  // The server's copy is one file too: no PNG left beside it under --out.
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "out")) {
    EXPECT_NE(entry.path().extension(), ".png") << entry.path();
  }
  EXPECT_EQ(m->texture.width, 1024);
  EXPECT_EQ(m->uvs.size(), 2 * static_cast<size_t>(m->vertex_count()));
  auto metadata = mesh::read_metadata(file);
  ASSERT_TRUE(metadata.ok()) << metadata.status().message();
  EXPECT_EQ((*metadata)["paint"]["prompt"], "a blue egg");
  EXPECT_EQ((*metadata)["paint"]["seed"], 5);
  EXPECT_EQ((*metadata)["export"]["preset"], "unity");
  // The job list keeps the request without the mesh's bytes.
  const json listed = json::parse(c.Get("/v1/jobs/" + std::to_string(id))->body);
  EXPECT_EQ(listed.dump().find(mesh64.substr(0, 64)), std::string::npos);

  // A running paint is cancelled on the image lane: it ends cancelled, with no result.
  const uint64_t long_paint = post_job(c,
                                       {{"kind", "paint"},
                                        {"mesh", mesh64},
                                        {"prompt", "a slow egg"},
                                        {"steps", 30},
                                        {"views", {{"ring", 12}}},
                                        {"view_size", 128}},
                                       &status)["id"];
  ASSERT_EQ(status, 202);
  bool running = false;
  for (int i = 0; i < 600 && !running; ++i) {
    running =
        json::parse(c.Get("/v1/jobs/" + std::to_string(long_paint))->body)["state"] == "running";
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(running);
  c.Post("/v1/jobs/" + std::to_string(long_paint) + "/cancel", "", "application/json");
  const std::vector<json> cancelled = events_of(c, long_paint);
  ASSERT_FALSE(cancelled.empty());
  EXPECT_EQ(cancelled.back()["type"], "cancelled") << cancelled.back().dump();
  for (const json& e : cancelled) EXPECT_NE(e["type"], "painted");

  for (const auto& [body, field] : std::vector<std::pair<json, std::string>>{
           {{{"kind", "paint"}, {"prompt", "x"}}, "mesh"},
           {{{"kind", "paint"}, {"prompt", "x"}, {"mesh", "not base64!"}}, "mesh"},
           {{{"kind", "paint"}, {"prompt", "x"}, {"mesh", "aGVsbG8="}}, ""},
           {{{"kind", "paint"}, {"prompt", "x"}, {"mesh", mesh64}, {"mesh_format", "stl"}},
            "mesh_format"},
           {{{"kind", "paint"}, {"prompt", "x"}, {"mesh", mesh64}, {"format", "obj"}}, "format"},
           {{{"kind", "paint"}, {"prompt", "x"}, {"mesh", mesh64}, {"init_image", "x"}},
            "init_image"},
           {{{"kind", "paint"}, {"prompt", "x"}, {"mesh", mesh64}, {"views", {{"ring", 40}}}}, ""},
           {{{"kind", "paint"}, {"prompt", "x"}, {"mesh", mesh64}, {"texture_size", 1000}}, ""},
           {{{"kind", "paint"}, {"mesh", mesh64}}, "prompt"}}) {
    const json refused = post_job(c, body, &status);
    EXPECT_EQ(status, 400) << body.dump() << " " << refused.dump();
    if (!field.empty()) {
      EXPECT_EQ(refused["field"], field) << refused.dump();
    }
  }
}

TEST_F(ServeTest, BadRequestsAreAnsweredWithTheFieldAndTheServerGoesOn) {
  ServeProcess server(dir_, {"--max-queue", "2", "--per-client", "2"});
  ASSERT_GT(server.port(), 0) << server.err();
  auto c = server.client();
  struct Case {
    std::string body;
    int status;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"{not json", 400, ""},
      {"[1, 2]", 400, ""},
      {R"({"prompt": "x", "sed": 3})", 400, "sed"},
      {R"({"prompt": 7})", 400, "prompt"},
      {R"({"prompt": "x", "variations": 99})", 400, "variations"},
      {R"({"prompt": "x", "top_p": 1.5})", 400, "top_p"},
      {R"({"prompt": "x", "temperature": 0})", 400, "temperature"},
      {R"({"prompt": "x", "top_k": "many"})", 400, "top_k"},
      {R"({"prompt": "x", "resolution": 64})", 400, "resolution"},
      {R"({"prompt": "x", "format": "exe"})", 400, "format"},
      {R"({"prompt": "x", "name": "../../etc/passwd"})", 400, "name"},
      {json{{"prompt", std::string(5000, 'a')}}.dump(), 400, "prompt"},
      {R"({"prompt": "x", "preset": "minecraft"})", 400, "preset"},
      {R"({"prompt": "x", "height": -1})", 400, "height"},
      {R"({"prompt": "x", "pivot": "top"})", 400, "pivot"},
      {R"({"prompt": "x", "size": 1, "height": 2})", 400, "size"},
      {R"({"prompt": "x", "unit": "inches"})", 400, "unit"},
      {R"({"prompt": "x", "max_faces": -5})", 400, "max_faces"},
  };
  for (const Case& k : cases) {
    auto res = c.Post("/v1/jobs", k.body, "application/json");
    ASSERT_TRUE(res) << k.body;
    EXPECT_EQ(res->status, k.status) << k.body << " -> " << res->body;
    const json error = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << res->body;
    EXPECT_TRUE(error.contains("error"));
    if (!k.field.empty()) {
      EXPECT_EQ(error.value("field", ""), k.field) << res->body;
    }
  }
  // Web pages: another site's page (its Origin) and a rebound DNS name (its Host) are refused.
  {
    httplib::Headers from_page = {{"Origin", "http://evil.example"}};
    auto res = c.Post("/v1/jobs", from_page, R"({"prompt": "x"})", "text/plain");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 403);
    EXPECT_EQ(json::parse(res->body)["field"], "Origin");
    httplib::Headers rebound = {{"Host", "evil.example:8590"}};
    auto other = c.Get("/v1/jobs", rebound);
    ASSERT_TRUE(other);
    EXPECT_EQ(other->status, 403);
    EXPECT_EQ(json::parse(other->body)["field"], "Host");
  }
  // A body beyond the limit.
  auto huge = c.Post("/v1/jobs", std::string(17 * 1024 * 1024, ' '), "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  // The HTTP library's own answers carry the JSON error too.
  const json too_big = json::parse(huge->body, nullptr, false);
  ASSERT_TRUE(too_big.is_object()) << "413 body: '" << huge->body << "'";
  EXPECT_EQ(too_big.value("field", ""), "body");
  EXPECT_NE(too_big.value("error", "").find("16 MiB"), std::string::npos) << huge->body;
  auto nowhere = c.Get("/v2/nothing");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 404);
  EXPECT_EQ(json::parse(nowhere->body, nullptr, false).value("field", ""), "path") << nowhere->body;
  EXPECT_EQ(c.Get("/v1/jobs/999")->status, 404);
  // The queue's limits: the per-client one first (2), then the whole queue (2).
  int status = 0;
  const json slow = {{"prompt", "a lamp"}, {"variations", 4}, {"seed", 1}, {"resolution", 129}};
  const uint64_t first = post_job(c, slow, &status)["id"];
  EXPECT_EQ(status, 202);
  std::vector<uint64_t> queued;
  for (int i = 0; i < 4; ++i) {
    const json r = post_job(c, {{"prompt", "a mug"}}, &status);
    if (status == 202) {
      queued.push_back(r["id"]);
    } else {
      EXPECT_EQ(status, 429) << r.dump();
      EXPECT_TRUE(r.value("field", "") == "client" || r.value("field", "") == "queue") << r.dump();
    }
  }
  EXPECT_LE(queued.size(), 2u);
  // Cancel: the queued ones leave the queue, the running one stops.
  for (uint64_t id : queued) {
    auto res = c.Post("/v1/jobs/" + std::to_string(id) + "/cancel", "", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(json::parse(res->body)["state"], "cancelled");
  }
  c.Post("/v1/jobs/" + std::to_string(first) + "/cancel", "", "application/json");
  const std::vector<json> events = events_of(c, first);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["type"], "cancelled");
  // A client that leaves mid-stream costs nobody else anything.
  const uint64_t next = post_job(c, {{"prompt", "a ball"}, {"resolution", 33}}, &status)["id"];
  {
    httplib::Client leaver = server.client();
    int chunks = 0;
    leaver.Get("/v1/jobs/" + std::to_string(next) + "/events",
               [&](const char*, size_t) { return ++chunks < 2; });
  }
  const std::vector<json> rest = events_of(c, next);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back()["type"], "done");
  EXPECT_EQ(c.Get("/healthz")->status, 200);
}

TEST_F(ServeTest, EveryPathOfTheOpenApiDocumentIsAnsweredAsDocumented) {
  std::ifstream in(fs::path(TESSERA_SOURCE_DIR) / "docs" / "serve-openapi.json");
  const json doc = json::parse(in, nullptr, false);
  ASSERT_TRUE(doc.is_object());
  ServeProcess server(dir_, {});
  ASSERT_GT(server.port(), 0) << server.err();
  auto c = server.client();
  // A finished job for the paths with {id}.
  int status = 0;
  const uint64_t id = post_job(c, {{"prompt", "a cube"}, {"resolution", 17}}, &status)["id"];
  ASSERT_EQ(status, 202);
  ASSERT_EQ(events_of(c, id).back()["type"], "done");
  int checked = 0;
  for (const auto& [path, methods] : doc["paths"].items()) {
    std::string url = path;
    if (const size_t at = url.find("{id}"); at != std::string::npos) {
      url.replace(at, 4, std::to_string(id));
    }
    for (const auto& [method, operation] : methods.items()) {
      httplib::Result res =
          method == "get"
              ? c.Get(url)
              : c.Post(url, R"({"prompt": "a cube", "resolution": 17})", "application/json");
      ASSERT_TRUE(res) << method << " " << url;
      EXPECT_TRUE(operation["responses"].contains(std::to_string(res->status)))
          << method << " " << url << " answered " << res->status << ", not documented";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 11);
  // And the request schema's fields are the ones the server takes.
  std::set<std::string> documented;
  for (const auto& [key, v] : doc["components"]["schemas"]["JobRequest"]["properties"].items()) {
    documented.insert(key);
  }
  std::set<std::string> taken = runtime::job_request_keys();
  for (const char* k :
       {"format", "preset", "height", "size", "pivot", "up_axis", "unit", "max_faces", "kind"})
    taken.insert(k);
  EXPECT_EQ(documented, taken);
  // The image job's schema, likewise.
  std::set<std::string> image_documented;
  for (const auto& [key, v] :
       doc["components"]["schemas"]["ImageJobRequest"]["properties"].items()) {
    image_documented.insert(key);
  }
  EXPECT_EQ(image_documented, runtime::image_request_keys());
  // And the paint job's: its own keys plus the server's format and export fields.
  std::set<std::string> paint_documented;
  for (const auto& [key, v] :
       doc["components"]["schemas"]["PaintJobRequest"]["properties"].items()) {
    paint_documented.insert(key);
  }
  std::set<std::string> paint_taken = runtime::paint_request_keys();
  for (const char* k :
       {"format", "preset", "height", "size", "pivot", "up_axis", "unit", "max_faces"})
    paint_taken.insert(k);
  EXPECT_EQ(paint_documented, paint_taken);
}

TEST_F(ServeTest, AnotherModelLoadsBetweenJobsAndAFailedLoadKeepsTheOld) {
  ServeProcess server(dir_, {});
  ASSERT_GT(server.port(), 0) << server.err();
  auto c = server.client();
  auto load = [&](const json& body) {
    return c.Post("/v1/models/load", body.dump(), "application/json");
  };
  auto models = [&] { return json::parse(c.Get("/v1/models")->body); };
  auto settled = [&] {
    for (int i = 0; i < 600; ++i) {
      if (!models().contains("loading")) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  EXPECT_EQ(load(json::object())->status, 400);
  EXPECT_EQ(json::parse(load({{"modle", "x"}})->body)["field"], "modle");
  // A name nobody knows: the old model stays, the failure names it.
  ASSERT_EQ(load({{"model", "nobody/nothing"}})->status, 202);
  ASSERT_TRUE(settled());
  const json failed = models();
  ASSERT_TRUE(failed.contains("load_error")) << failed.dump();
  EXPECT_NE(failed["load_error"].get<std::string>().find("nobody/nothing"), std::string::npos);
  EXPECT_FALSE(failed["loaded"].is_null());
  int status = 0;
  const uint64_t before = post_job(c, {{"prompt", "a cube"}, {"resolution", 17}}, &status)["id"];
  EXPECT_EQ(events_of(c, before).back()["type"], "done");
  // A folder: loaded between two jobs; the next job runs on it.
  const std::string folder = std::string(TESSERA_SOURCE_DIR) + "/assets/models/tessera-tiny";
  ASSERT_EQ(load({{"model", folder}})->status, 202);
  const uint64_t after = post_job(c, {{"prompt", "a ball"}, {"resolution", 17}}, &status)["id"];
  EXPECT_EQ(events_of(c, after).back()["type"], "done");
  ASSERT_TRUE(settled());
  const json loaded = models();
  EXPECT_FALSE(loaded.contains("load_error")) << loaded.dump();
  EXPECT_EQ(loaded["loaded"]["path"].get<std::string>().find("tessera-tiny") != std::string::npos,
            true)
      << loaded.dump();
}

TEST_F(ServeTest, SixteenClientsAtOnceAreAllServedAndNoneIsLost) {
  ServeProcess server(dir_, {"--per-client", "16"});
  ASSERT_GT(server.port(), 0) << server.err();
  std::vector<std::thread> clients;
  std::vector<std::string> ends(16);
  for (int i = 0; i < 16; ++i) {
    clients.emplace_back([&, i] {
      auto c = server.client();
      int status = 0;
      const json r = post_job(
          c, {{"prompt", i % 2 ? "a chair" : "a mug"}, {"seed", i}, {"resolution", 17}}, &status);
      if (status != 202) {
        ends[i] = "refused " + r.dump();
        return;
      }
      const std::vector<json> events = events_of(c, r["id"]);
      ends[i] = events.empty() ? "no events" : events.back().value("type", "?");
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(ends[i], "done") << "client " << i;
  auto c = server.client();
  EXPECT_NE(c.Get("/metrics")->body.find("tessera_jobs{state=\"done\"} 16"), std::string::npos);
}

TEST_F(ServeTest, ASlowClientIsCutOffAndDelaysNobody) {
  ServeProcess server(dir_, {});
  ASSERT_GT(server.port(), 0) << server.err();
  // A request that never finishes its body.
  const int slow = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(slow, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(slow, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string partial =
      "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 100\r\n\r\n{\"prompt\"";
  ASSERT_EQ(::send(slow, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
  // Everyone else is served meanwhile.
  auto c = server.client();
  int status = 0;
  const json r = post_job(c, {{"prompt", "a cube"}, {"resolution", 17}}, &status);
  ASSERT_EQ(status, 202);
  EXPECT_EQ(events_of(c, r["id"]).back()["type"], "done");
  // The silent one is cut off after the server's read timeouts, with no job made of it.
  timeval wait{20, 0};
  ::setsockopt(slow, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  char buffer[512];
  const auto t0 = std::chrono::steady_clock::now();
  ssize_t n = 0;
  std::string answer;
  while ((n = ::recv(slow, buffer, sizeof(buffer), 0)) > 0)
    answer.append(buffer, static_cast<size_t>(n));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(slow);
  EXPECT_EQ(n, 0) << "the connection should be closed by the server";
  EXPECT_LT(waited, 15.0);  // the read timeout, counted twice by cpp-httplib (about 10 s)
  EXPECT_EQ(json::parse(c.Get("/v1/jobs")->body).size(), 1u);
}

TEST_F(ServeTest, BeyondLoopbackEveryCallNeedsTheToken) {
  ServeProcess server(dir_, {"--listen", "127.0.0.2"});
  ASSERT_GT(server.port(), 0) << server.err();
  auto c = server.client();
  EXPECT_EQ(c.Get("/healthz")->status, 200);  // probes stay open
  auto refused = c.Get("/v1/models");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  EXPECT_NE(refused->body.find("bearer token"), std::string::npos);
  std::string token;
  std::ifstream(server.config() / "tessera" / "serve-token") >> token;
  ASSERT_GE(token.size(), 32u);
  EXPECT_EQ(fs::status(server.config() / "tessera" / "serve-token").permissions() &
                fs::perms::others_read,
            fs::perms::none);
  c.set_bearer_token_auth(token);
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
  c.set_bearer_token_auth("wrong");
  EXPECT_EQ(c.Get("/v1/jobs")->status, 401);
}

TEST_F(ServeTest, ListenTakesHostAndPortAsPeopleWriteThem) {
  // HOST:PORT (the port here is 0: any free one; the tests' --port 0 agrees with it).
  {
    ServeProcess server(dir_ / "a", {"--listen", "127.0.0.1:0"});
    ASSERT_GT(server.port(), 0) << server.err();
    EXPECT_EQ(server.client().Get("/healthz")->status, 200);
  }
  // Two different ports, and a port that is not one, are refused before anything starts.
  for (const std::string listen : {"127.0.0.1:9", "127.0.0.1:port", "[::1"}) {
    ServeProcess server(dir_ / "b", {"--listen", listen});
    EXPECT_EQ(server.port(), 0);
    EXPECT_EQ(server.wait(), 2) << listen;
    EXPECT_NE(server.err().find("--listen " + listen), std::string::npos) << server.err();
  }
}

TEST_F(ServeTest, ARestartSaysWhichAcceptedJobsItDropped) {
  {
    ServeProcess server(dir_, {});
    ASSERT_GT(server.port(), 0) << server.err();
    auto c = server.client();
    int status = 0;
    post_job(c, {{"prompt", "a lamp"}, {"variations", 4}, {"seed", 1}, {"resolution", 129}},
             &status);
    ASSERT_EQ(status, 202);
    post_job(c, {{"prompt", "a vase"}}, &status);
    ASSERT_EQ(status, 202);
    server.stop(SIGKILL);
  }
  ServeProcess again(dir_, {});
  ASSERT_GT(again.port(), 0) << again.err();
  const std::string err = again.err();
  EXPECT_NE(err.find("dropped by the last stop: job 1"), std::string::npos) << err;
  EXPECT_NE(err.find("a vase"), std::string::npos) << err;
}

}  // namespace
}  // namespace tessera
