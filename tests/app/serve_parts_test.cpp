// The parts of tessera serve one by one (app/serve/): the address as people write it, the gate
// every request passes, the job table's limits, cancel, end and journal, and the event stream's
// framing. tests/app/serve_test.cpp runs the whole server over HTTP.
#include <gtest/gtest.h>

#include "core/base64.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "app/serve/event_stream.h"
#include "app/serve/jobs.h"
#include "app/serve/security.h"

namespace tessera::serve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(ServeListen, AddressesAsPeopleWriteThem) {
  struct Case {
    std::string text;
    std::string host;
    int port;
    bool ipv6;
  };
  const Case cases[] = {
      {"127.0.0.1", "127.0.0.1", kDefaultPort, false},
      {"0.0.0.0:9000", "0.0.0.0", 9000, false},
      {"localhost:0", "localhost", 0, false},
      {"::1", "::1", kDefaultPort, true},
      {"::", "::", kDefaultPort, true},
      {"[::1]", "::1", kDefaultPort, true},
      {"[::]:9000", "::", 9000, true},
      {"[fe80::1%eth0]:80", "fe80::1%eth0", 80, true},
      {"studio.local:65535", "studio.local", 65535, false},
  };
  for (const Case& c : cases) {
    auto a = parse_listen(c.text, kDefaultPort, false);
    ASSERT_TRUE(a.ok()) << c.text << ": " << a.status().message();
    EXPECT_EQ(a->host, c.host) << c.text;
    EXPECT_EQ(a->port, c.port) << c.text;
    EXPECT_EQ(a->ipv6, c.ipv6) << c.text;
  }
  EXPECT_EQ(parse_listen("[::1]:9000", kDefaultPort, false)->url_host(), "[::1]");
  EXPECT_EQ(parse_listen("0.0.0.0", kDefaultPort, false)->url_host(), "0.0.0.0");
  // --port alone, and --port agreeing with the address's port.
  EXPECT_EQ(parse_listen("0.0.0.0", 7000, true)->port, 7000);
  EXPECT_EQ(parse_listen("0.0.0.0:7000", 7000, true)->port, 7000);
}

TEST(ServeListen, BadAddressesNameWhatIsWrong) {
  struct Case {
    std::string text;
    std::string says;
  };
  const Case cases[] = {
      {"0.0.0.0:port", "the port \"port\""},
      {"0.0.0.0:70000", "0-65535"},
      {"0.0.0.0:", "the port \"\""},
      {":9000", "names no address"},
      {"", "names no address"},
      {"[::1", "']'"},
      {"[::1]9000", "after ']'"},
      {"[]:9000", "names no address"},
      {"a b:80", "not an address"},
  };
  for (const Case& c : cases) {
    auto a = parse_listen(c.text, kDefaultPort, false);
    ASSERT_FALSE(a.ok()) << c.text;
    EXPECT_NE(a.status().message().find(c.says), std::string::npos) << a.status().message();
  }
  // What the old server made of --listen 0.0.0.0:9000 (the port appended again): more than one
  // colon reads as an IPv6 address, which the operating system then refuses to bind.
  EXPECT_TRUE(parse_listen("0.0.0.0:9000:8590", kDefaultPort, false)->ipv6);
  auto two = parse_listen("0.0.0.0:9000", 8000, true);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("--port 8000"), std::string::npos);
  EXPECT_NE(two.status().message().find("two ports"), std::string::npos);
}

TEST(ServeGate, LoopbackPagesHostsAndTokens) {
  EXPECT_TRUE(is_loopback("127.0.0.1"));
  EXPECT_TRUE(is_loopback("::1"));
  EXPECT_TRUE(is_loopback("localhost"));
  EXPECT_FALSE(is_loopback("127.0.0.2"));
  EXPECT_FALSE(is_loopback("0.0.0.0"));
  EXPECT_EQ(host_name("localhost:8590"), "localhost");
  EXPECT_EQ(host_name("[::1]:8590"), "[::1]");
  EXPECT_EQ(host_name("[::1]"), "[::1]");
  EXPECT_EQ(host_name("127.0.0.1"), "127.0.0.1");

  const GateOptions open{"", ""};
  using Kind = GateAnswer::Kind;
  EXPECT_EQ(gate({"GET", "/v1/jobs", "", "127.0.0.1:8590", ""}, open).kind, Kind::kPass);
  EXPECT_EQ(gate({"GET", "/v1/jobs", "", "[::1]:8590", ""}, open).kind, Kind::kPass);
  // A rebound DNS name and another site's page.
  GateAnswer a = gate({"GET", "/v1/jobs", "", "evil.example:8590", ""}, open);
  EXPECT_EQ(a.kind, Kind::kRefuse);
  EXPECT_EQ(a.refusal.status, 403);
  EXPECT_EQ(a.refusal.field, "Host");
  a = gate({"POST", "/v1/jobs", "http://evil.example", "127.0.0.1", ""}, open);
  EXPECT_EQ(a.refusal.status, 403);
  EXPECT_EQ(a.refusal.field, "Origin");
  // The --cors origin passes and gets its preflight.
  const GateOptions cors{"http://studio.example", ""};
  EXPECT_EQ(gate({"POST", "/v1/jobs", "http://studio.example", "localhost", ""}, cors).kind,
            Kind::kPass);
  EXPECT_EQ(gate({"OPTIONS", "/v1/jobs", "http://studio.example", "localhost", ""}, cors).kind,
            Kind::kPreflight);
  // With a token: every path but the probes needs it, whatever the Host.
  const GateOptions token{"", "secret"};
  EXPECT_EQ(gate({"GET", "/healthz", "", "farm:8590", ""}, token).kind, Kind::kPass);
  EXPECT_EQ(gate({"GET", "/readyz", "", "farm:8590", ""}, token).kind, Kind::kPass);
  a = gate({"GET", "/v1/models", "", "farm:8590", ""}, token);
  EXPECT_EQ(a.refusal.status, 401);
  EXPECT_EQ(a.refusal.field, "Authorization");
  EXPECT_EQ(gate({"GET", "/v1/models", "", "farm", "Bearer wrong"}, token).kind, Kind::kRefuse);
  EXPECT_EQ(gate({"GET", "/v1/models", "", "farm", "Bearer secret"}, token).kind, Kind::kPass);
}

TEST(ServeJobs, BodiesAreReadOrRefusedWithTheirField) {
  Refusal r;
  auto job = parse_job(R"({"prompt": "a chair", "format": "obj", "height": 1.2})", &r);
  ASSERT_TRUE(job) << r.message;
  EXPECT_EQ(job->format, "obj");
  EXPECT_TRUE(job->exporting.height_given);
  // Sampling without a seed gets one, so the files say how to make it again.
  job = parse_job(R"({"prompt": "a chair", "variations": 3})", &r);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->options.variations, 3);
  const struct {
    const char* body;
    const char* field;
  } bad[] = {{"{", ""},
             {R"({"prompt": "x", "format": "exe"})", "format"},
             {R"({"prompt": "x", "format": 3})", "format"},
             {R"({"prompt": "x", "pivot": "top"})", "pivot"},
             {R"({"prompt": "x", "max_faces": 1.5})", "max_faces"},
             {R"({"prompt": "x", "unit": "inches"})", "unit"},
             {R"({"prompt": "x", "sed": 1})", "sed"}};
  for (const auto& b : bad) {
    r = Refusal{};
    EXPECT_FALSE(parse_job(b.body, &r)) << b.body;
    EXPECT_EQ(r.status, 400) << b.body;
    EXPECT_EQ(r.field, b.field) << b.body << ": " << r.message;
    EXPECT_FALSE(r.message.empty());
  }
}

class ServeJobTable : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-serve-parts-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::shared_ptr<Job> job(const std::string& client) {
    Refusal r;
    auto j = parse_job(R"({"prompt": "a mug"})", &r);
    j->client = client;
    return j;
  }
  std::string journal() const { return (dir_ / "jobs.jsonl").string(); }
  fs::path dir_;
};

TEST_F(ServeJobTable, LimitsPerClientThenForTheQueue) {
  JobTable table(JobLimits{3, 2}, journal());
  EXPECT_FALSE(table.admit(job("a")));
  EXPECT_FALSE(table.admit(job("a")));
  auto third = table.admit(job("a"));
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 429);
  EXPECT_EQ(third->field, "client");
  EXPECT_FALSE(table.admit(job("b")));
  auto full = table.admit(job("c"));
  ASSERT_TRUE(full);
  EXPECT_EQ(full->field, "queue");
  EXPECT_EQ(table.queue_length(), 3u);
  EXPECT_EQ(table.describe(*table.find(3))["queue_position"], 2);
  // The running job leaves the queue and frees its client's share.
  auto running = table.start_next();
  ASSERT_TRUE(running);
  EXPECT_EQ(running->id, 1u);
  EXPECT_EQ(running->state, JobState::kRunning);
  EXPECT_FALSE(table.admit(job("a")));
}

TEST_F(ServeJobTable, CancelEndAndTheJournalOfWhatARestartDropped) {
  {
    JobTable table(JobLimits{}, journal());
    ASSERT_FALSE(table.admit(job("a")));
    ASSERT_FALSE(table.admit(job("a")));
    ASSERT_FALSE(table.admit(job("a")));
    auto first = table.start_next();
    EXPECT_TRUE(table.cancel(*first));  // running: the caller stops the Session
    EXPECT_TRUE(first->cancel_requested);
    auto second = table.find(2);
    EXPECT_FALSE(table.cancel(*second));  // queued: cancelled here
    EXPECT_EQ(second->state, JobState::kCancelled);
    EXPECT_EQ(json::parse(second->events.back())["type"], "cancelled");
    EXPECT_EQ(table.queue_length(), 1u);
    second->events.insert(second->events.begin(),
                          json{{"candidate", 0}, {"type", "preview"}, {"mesh", "AAAA"}}.dump());
    table.end(*first, JobState::kDone, "");
    EXPECT_EQ(table.count_by_state()["done"], 1);
    EXPECT_EQ(table.count_by_state()["cancelled"], 1);
    EXPECT_EQ(table.count_by_state()["queued"], 1);
  }
  // Job 3 was accepted and never ended: the next start says so, once.
  testing::internal::CaptureStderr();
  JobTable(JobLimits{}, journal()).report_dropped();
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("dropped by the last stop: job 3"), std::string::npos) << said;
  EXPECT_EQ(said.find("job 1 "), std::string::npos) << said;
  EXPECT_EQ(said.find("job 2 "), std::string::npos) << said;
  EXPECT_FALSE(fs::exists(journal()));
  // A torn or foreign journal is read past, not trusted.
  std::ofstream(journal()) << "{\"id\": 9}\nnot json\n[1]\n{\"ended\": \"x\"}\n";
  testing::internal::CaptureStderr();
  JobTable(JobLimits{}, journal()).report_dropped();
  EXPECT_NE(testing::internal::GetCapturedStderr().find("job 9"), std::string::npos);
}

TEST(ServeEventStream, FramesMeshesAndEndedPreviews) {
  EXPECT_EQ(encode_base64(""), "");
  EXPECT_EQ(encode_base64("f"), "Zg==");
  EXPECT_EQ(encode_base64("fo"), "Zm8=");
  EXPECT_EQ(encode_base64("foo"), "Zm9v");
  EXPECT_EQ(encode_base64("foobar"), "Zm9vYmFy");
  mesh::Mesh m;
  m.positions = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  m.triangles = {0, 1, 2};
  EXPECT_EQ(compact_mesh(m).size(), (4 + 8 + 36 + 12 + 2) / 3 * 4u);
  EXPECT_EQ(compact_mesh(m).substr(0, 4), encode_base64("TSM1").substr(0, 4));

  std::vector<std::string> events = {R"({"type":"queued"})", R"({"type":"started"})"};
  size_t sent = 0;
  EXPECT_EQ(sse_frames(events, &sent),
            "data: {\"type\":\"queued\"}\n\ndata: {\"type\":\"started\"}\n\n");
  EXPECT_EQ(sent, 2u);
  EXPECT_EQ(sse_frames(events, &sent), ":\n\n");  // nothing new: a comment keeps the line alive
  events.push_back(json{{"candidate", 0}, {"type", "preview"}, {"mesh", "AAAA"}}.dump());
  events.push_back(json{{"candidate", 0}, {"type", "mesh"}, {"mesh", "BBBB"}}.dump());
  drop_preview_meshes(&events);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_FALSE(json::parse(events[2]).contains("mesh"));
  EXPECT_EQ(json::parse(events[3])["mesh"], "BBBB");  // the final mesh stays
}

}  // namespace
}  // namespace tessera::serve
