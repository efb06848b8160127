// Session: the worker thread, event order, cancellation at every point, replacement of a running
// job, and submit/cancel storms (run under -DTESSERA_SANITIZE=thread to check for races), on a
// model directory assembled from the parity fixtures.
#include "engine/runtime/session.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/safetensors.h"
#include "engine/runtime/lane_internal.h"
#include "engine/shape/pipeline.h"
#include "kernels/forwarding_backend.h"
#include "tests/support/fixture_model_dir.h"

namespace tessera::runtime {
namespace {

using std::chrono::milliseconds;
using testing::FixtureModelDir;

constexpr milliseconds kEventTimeout{30000};

// Small resolutions: the fixture's decoder is slow per query and the shape does not matter here.
JobOptions small_job(const std::string& prompt = testing::kParityPrompt) {
  JobOptions job;
  job.prompt = prompt;
  job.generation.bbox = std::array<float, 3>{0.5f, 1.0f, 0.25f};
  job.mesh.resolution = 17;
  job.preview_resolution = 9;
  return job;
}

std::unique_ptr<Session> open_session(const FixtureModelDir& dir, SessionOptions options = {}) {
  ShapeModelOptions model;
  model.path = dir.path();
  auto session = Session::open(model, std::move(options));
  EXPECT_TRUE(session.ok()) << session.status().to_string();
  return session.ok() ? std::move(session).value() : nullptr;
}

// Events until the terminal event of job `id` (those of other jobs included).
std::vector<Event> collect_until_terminal(Session& session, uint64_t id) {
  std::vector<Event> events;
  for (;;) {
    auto e = session.wait_event(kEventTimeout);
    if (!e) {
      ADD_FAILURE() << "no event within the timeout";
      return events;
    }
    events.push_back(*e);
    if (e->job == id && e->terminal()) return events;
  }
}

// Thread-safe event recorder for callback mode.
struct Recorder {
  std::mutex mutex;
  std::vector<Event> events;
  void add(const Event& e) {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back(e);
  }
  std::vector<Event> snapshot() {
    std::lock_guard<std::mutex> lock(mutex);
    return events;
  }
  bool has_terminal(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const Event& e : events) {
      if (e.job == id && e.terminal()) return true;
    }
    return false;
  }
};

bool wait_for(const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + kEventTimeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

class SessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new FixtureModelDir("session"); }
  static void TearDownTestSuite() { delete dir_; }
  static FixtureModelDir* dir_;
};
FixtureModelDir* SessionTest::dir_ = nullptr;

TEST_F(SessionTest, EventsArriveInOrder) {
  auto session = open_session(*dir_);
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(session->num_latents(), 16);
  JobOptions job = small_job();
  job.preview_every = 4;
  const uint64_t id = session->submit(job);
  const std::vector<Event> events = collect_until_terminal(*session, id);
  ASSERT_FALSE(events.empty());

  std::vector<std::string> stages;
  std::vector<int32_t> token_ids;
  std::vector<int64_t> partial_at;
  const FinalMeshEvent* final_mesh = nullptr;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    EXPECT_EQ(e.job, id);
    if (const auto* s = std::get_if<StageEvent>(&e.payload)) {
      stages.push_back(s->name);
      EXPECT_GE(s->ms, 0.0);
    } else if (const auto* t = std::get_if<TokenEvent>(&e.payload)) {
      EXPECT_EQ(t->index, static_cast<int64_t>(token_ids.size()));
      EXPECT_GE(t->ms, 0.0);
      token_ids.push_back(t->id);
    } else if (const auto* p = std::get_if<PartialMeshEvent>(&e.payload)) {
      // Meshed beside the decode (the CPU backend): after the token that completed its prefix,
      // possibly a few tokens later, and always before the decode stage.
      EXPECT_LE(p->tokens, static_cast<int64_t>(token_ids.size()));
      EXPECT_EQ(p->tokens % 4, 0);
      EXPECT_TRUE(stages.size() < 3 || stages.back() != kStageDecode) << "preview after decode";
      ASSERT_NE(p->mesh, nullptr);
      EXPECT_TRUE(mesh::validate(*p->mesh).ok());
      partial_at.push_back(p->tokens);
    } else if (const auto* f = std::get_if<FinalMeshEvent>(&e.payload)) {
      final_mesh = f;
      EXPECT_EQ(stages.back(), kStageCleanup);
    } else if (const auto* err = std::get_if<ErrorEvent>(&e.payload)) {
      FAIL() << err->status.to_string();
    }
  }
  EXPECT_TRUE(std::holds_alternative<DoneEvent>(events.back().payload));
  const std::vector<std::string> expected_stages = {
      kStageText, kStagePrefill, kStageDecode, kStageLatentDecode, kStageExtraction, kStageCleanup};
  EXPECT_EQ(stages, expected_stages);
  // The mode first (CPU: KV cache on, graphs n/a with a reason); prefill is reported before the
  // first token, decode after the last.
  ASSERT_GE(events.size(), 4u);
  const auto* mode = std::get_if<ModeEvent>(&events[0].payload);
  ASSERT_NE(mode, nullptr);
  EXPECT_TRUE(mode->kv_cache);
  EXPECT_EQ(mode->graphs, GraphMode::kUnavailable);
  EXPECT_FALSE(mode->graphs_reason.empty());
  EXPECT_FALSE(mode->backend.empty());
  EXPECT_TRUE(std::holds_alternative<StageEvent>(events[2].payload));
  EXPECT_TRUE(std::holds_alternative<TokenEvent>(events[3].payload));
  EXPECT_EQ(events[0].lane, Lane::kShape);
  ASSERT_EQ(token_ids.size(), 16u);
  // Previews at 4, 8, 12 where that prefix has a surface (none after the last token).
  for (int64_t at : partial_at) EXPECT_LT(at, 16);
  ASSERT_NE(final_mesh, nullptr);
  EXPECT_EQ(final_mesh->tokens, token_ids);
  EXPECT_EQ(final_mesh->prompt_tokens, 8);
  EXPECT_GT(final_mesh->mesh->triangle_count(), 0);
  EXPECT_GT(final_mesh->extraction.queries, 0);
  // Greedy from the fixture's prompt and box: the reference's tokens.
  SafeTensors expected = SafeTensors::open(std::string(TESSERA_SOURCE_DIR) +
                                           "/tests/fixtures/parity/expected.safetensors")
                             .value();
  TensorView greedy = expected.view("gpt.greedy_tokens").value();
  EXPECT_EQ(token_ids,
            std::vector<int32_t>(greedy.as<const int32_t>(), greedy.as<const int32_t>() + 16));
  EXPECT_TRUE(wait_for([&] { return session->idle(); }));
  EXPECT_FALSE(session->poll().has_value());
}

TEST_F(SessionTest, CancelMidGenerationEndsWithCancelled) {
  Recorder recorder;
  Session* self = nullptr;
  std::atomic<bool> ready{false};
  SessionOptions options;
  options.on_event = [&](const Event& e) {
    recorder.add(e);
    const auto* t = std::get_if<TokenEvent>(&e.payload);
    if (t != nullptr && e.job == 1 && t->index == 5 && ready.load()) self->cancel();
  };
  auto session = open_session(*dir_, options);
  ASSERT_NE(session, nullptr);
  self = session.get();
  ready.store(true);
  const uint64_t id = session->submit(small_job());
  ASSERT_TRUE(wait_for([&] { return recorder.has_terminal(id); }));
  const std::vector<Event> events = recorder.snapshot();
  ASSERT_FALSE(events.empty());
  const auto* cancelled = std::get_if<CancelledEvent>(&events.back().payload);
  ASSERT_NE(cancelled, nullptr);
  EXPECT_NE(cancelled->reason.find("cancelled"), std::string::npos) << cancelled->reason;
  int64_t tokens = 0;
  for (const Event& e : events) {
    EXPECT_FALSE(std::holds_alternative<FinalMeshEvent>(e.payload));
    EXPECT_FALSE(std::holds_alternative<DoneEvent>(e.payload));
    if (std::holds_alternative<TokenEvent>(e.payload)) ++tokens;
  }
  EXPECT_EQ(tokens, 6);  // the flag is checked before the next step
  EXPECT_TRUE(wait_for([&] { return session->idle(); }));
  // The session keeps working after a cancel.
  const uint64_t next = session->submit(small_job());
  ASSERT_TRUE(wait_for([&] { return recorder.has_terminal(next); }));
  EXPECT_TRUE(std::holds_alternative<DoneEvent>(recorder.snapshot().back().payload));
}

TEST_F(SessionTest, CancelDuringEveryStage) {
  // Cancel when each kind of event is seen; every run must end Cancelled (or Done when the cancel
  // came after the last check) and never with an error.
  const std::vector<std::string> at = {kStageText,         kStagePrefill,    kStageDecode,
                                       kStageLatentDecode, kStageExtraction, "partial"};
  for (const std::string& stage : at) {
    SCOPED_TRACE(stage);
    Recorder recorder;
    Session* self = nullptr;
    SessionOptions options;
    options.on_event = [&](const Event& e) {
      recorder.add(e);
      const auto* s = std::get_if<StageEvent>(&e.payload);
      const bool hit = (s != nullptr && s->name == stage) ||
                       (stage == "partial" && std::holds_alternative<PartialMeshEvent>(e.payload));
      if (hit) self->cancel();
    };
    auto session = open_session(*dir_, options);
    ASSERT_NE(session, nullptr);
    self = session.get();
    JobOptions job = small_job();
    job.preview_every = 2;
    const uint64_t id = session->submit(job);
    ASSERT_TRUE(wait_for([&] { return recorder.has_terminal(id); }));
    const Event last = recorder.snapshot().back();
    EXPECT_FALSE(std::holds_alternative<ErrorEvent>(last.payload));
    if (stage != kStageExtraction && stage != "partial") {
      EXPECT_TRUE(std::holds_alternative<CancelledEvent>(last.payload));
    }
  }
}

TEST_F(SessionTest, ANewSubmitReplacesTheRunningJob) {
  Recorder recorder;
  Session* self = nullptr;
  std::atomic<uint64_t> replacement{0};
  SessionOptions options;
  options.on_event = [&](const Event& e) {
    recorder.add(e);
    const auto* t = std::get_if<TokenEvent>(&e.payload);
    if (t != nullptr && e.job == 1 && t->index == 3)
      replacement.store(self->submit(small_job("c d")));
  };
  auto session = open_session(*dir_, options);
  ASSERT_NE(session, nullptr);
  self = session.get();
  const uint64_t first = session->submit(small_job());
  ASSERT_EQ(first, 1u);
  ASSERT_TRUE(wait_for(
      [&] { return replacement.load() != 0 && recorder.has_terminal(replacement.load()); }));
  const uint64_t second = replacement.load();
  EXPECT_GT(second, first);
  const std::vector<Event> events = recorder.snapshot();
  // All of the first job's events come before the second's; the first ends Cancelled, the second
  // Done.
  bool seen_second = false;
  std::map<uint64_t, const Event*> terminal;
  for (const Event& e : events) {
    if (e.job == second) seen_second = true;
    if (e.job == first) {
      EXPECT_FALSE(seen_second) << "events of the two jobs interleave";
    }
    if (e.terminal()) {
      EXPECT_EQ(terminal.count(e.job), 0u) << "two terminal events for job " << e.job;
      terminal[e.job] = &e;
    }
  }
  ASSERT_EQ(terminal.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<CancelledEvent>(terminal[first]->payload));
  EXPECT_TRUE(std::holds_alternative<DoneEvent>(terminal[second]->payload));
}

TEST_F(SessionTest, QueuedJobsAreReplacedAndEveryJobEndsOnce) {
  // Jobs 2-4 are submitted from job 1's first token event: the worker is inside that callback, so
  // job 1 cannot finish first (submitting them from the test thread raced with a fast worker, which
  // could legitimately complete job 1 before job 2 arrived) and 2 and 3 must be queued when 4
  // comes.
  Recorder recorder;
  Session* self = nullptr;
  std::mutex ids_mutex;
  std::vector<uint64_t> ids;
  SessionOptions options;
  options.on_event = [&](const Event& e) {
    recorder.add(e);
    if (e.job == 1 && std::holds_alternative<TokenEvent>(e.payload) &&
        std::get<TokenEvent>(e.payload).index == 0) {
      std::lock_guard<std::mutex> lock(ids_mutex);
      for (int i = 0; i < 3; ++i) ids.push_back(self->submit(small_job()));
    }
  };
  auto session = open_session(*dir_, options);
  ASSERT_NE(session, nullptr);
  self = session.get();
  ASSERT_EQ(session->submit(small_job()), 1u);
  auto last = [&]() -> uint64_t {
    std::lock_guard<std::mutex> lock(ids_mutex);
    return ids.size() == 3 ? ids.back() : 0;
  };
  ASSERT_TRUE(wait_for([&] { return last() != 0 && recorder.has_terminal(last()); }));
  const std::vector<Event> events = recorder.snapshot();
  std::map<uint64_t, int> terminals;
  std::map<uint64_t, const Event*> terminal;
  uint64_t last_job = 0;
  for (const Event& e : events) {
    EXPECT_GE(e.job, last_job) << "events out of job order";
    last_job = e.job;
    if (e.terminal()) {
      ++terminals[e.job];
      terminal[e.job] = &e;
    }
    if (e.job != last()) {
      EXPECT_FALSE(std::holds_alternative<FinalMeshEvent>(e.payload)) << "job " << e.job;
    }
    if (e.job == 2 || e.job == 3) {
      EXPECT_TRUE(e.terminal()) << "a replaced queued job ran (job " << e.job << ")";
    }
  }
  for (uint64_t id : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4}}) {
    EXPECT_EQ(terminals[id], 1) << "job " << id;
  }
  ASSERT_EQ(terminal.size(), 4u);
  EXPECT_TRUE(std::holds_alternative<CancelledEvent>(terminal[1]->payload));
  for (uint64_t id : {uint64_t{2}, uint64_t{3}}) {
    const auto* c = std::get_if<CancelledEvent>(&terminal[id]->payload);
    ASSERT_NE(c, nullptr) << "job " << id;
    EXPECT_NE(c->reason.find("replaced by job " + std::to_string(id + 1)), std::string::npos)
        << c->reason;
  }
  EXPECT_TRUE(std::holds_alternative<DoneEvent>(terminal[4]->payload));
  EXPECT_TRUE(std::holds_alternative<DoneEvent>(events.back().payload));
}

TEST_F(SessionTest, BadOptionsComeBackAsErrorEvents) {
  auto session = open_session(*dir_);
  ASSERT_NE(session, nullptr);
  JobOptions job = small_job();
  job.mesh.resolution = 100;
  uint64_t id = session->submit(job);
  auto events = collect_until_terminal(*session, id);
  const auto* err = std::get_if<ErrorEvent>(&events.back().payload);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(err->status.message().find("resolution 100"), std::string::npos)
      << err->status.message();
  EXPECT_EQ(events.size(), 1u);  // rejected before any work

  job = small_job();
  job.preview_every = 3;
  job.preview_resolution = 10;
  id = session->submit(job);
  events = collect_until_terminal(*session, id);
  err = std::get_if<ErrorEvent>(&events.back().payload);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(err->status.message().find("preview"), std::string::npos) << err->status.message();

  job = small_job();
  job.generation.sampling.sample = true;
  job.generation.sampling.temperature = -1.0f;
  id = session->submit(job);
  events = collect_until_terminal(*session, id);
  err = std::get_if<ErrorEvent>(&events.back().payload);
  ASSERT_NE(err, nullptr);
  EXPECT_NE(err->status.message().find("temperature"), std::string::npos) << err->status.message();
}

// The CPU backend with injected failures: op number `fail_at` (counting every op and transfer of
// the backend from the last arm()) fails as a device out of memory would, either as a status
// (kOutOfMemory: what the CUDA backend returns for a failed cudaMalloc or cuBLAS workspace) or as
// a thrown std::bad_alloc (host allocations deep in a job). Counts the ops it sees.
class FaultBackend final : public kernels::ForwardingBackend {
 public:
  FaultBackend() : ForwardingBackend(kernels::make_cpu_backend()) {}
  std::atomic<int64_t> ops{0};
  void arm(int64_t fail_at, bool throw_bad_alloc) {
    ops = 0;
    fail_at_ = fail_at;
    throw_ = throw_bad_alloc;
  }
  void disarm() { fail_at_ = -1; }

 protected:
  Status run_op(const kernels::OpLabel& label, std::function<Status()> run) override {
    const int64_t n = ops++;
    if (n == fail_at_) {
      if (throw_) throw std::bad_alloc();
      return out_of_memory(std::string("injected: out of device memory in ") + label.op);
    }
    return run();
  }

 private:
  std::atomic<int64_t> fail_at_{-1};
  bool throw_ = false;
};

// An out-of-memory anywhere in a job (text encoder, prefill, a decode step, the latent decode,
// occupancy queries) ends that job with one ErrorEvent saying so, not a crash; the session and
// its pipeline stay usable: the next job gives the same mesh as before the failure.
TEST_F(SessionTest, OutOfMemoryDuringAJobIsAnErrorEventAndTheNextJobRuns) {
  FaultBackend backend;
  auto pipeline = shape::ShapePipeline::load(dir_->path(), {}, &backend);
  ASSERT_TRUE(pipeline.ok()) << pipeline.status().to_string();
  auto session = Session::create(std::move(pipeline).value());
  JobOptions job = small_job();
  job.preview_every = 8;
  job.preview_budget = 1.0;  // previews whenever the helper is free: faults can land in them

  auto run = [&](std::shared_ptr<const mesh::Mesh>* mesh) -> Status {
    const uint64_t id = session->submit(job);
    const std::vector<Event> events = collect_until_terminal(*session, id);
    if (events.empty()) return internal_error("no events");
    for (const Event& e : events) {
      if (const auto* f = std::get_if<FinalMeshEvent>(&e.payload)) *mesh = f->mesh;
    }
    if (const auto* err = std::get_if<ErrorEvent>(&events.back().payload)) return err->status;
    if (!std::holds_alternative<DoneEvent>(events.back().payload)) {
      return internal_error("the job did not end with Done");
    }
    return Status();
  };

  // Counted on a repeated job: the first one also encodes the unconditional prompt, later ones
  // reuse it.
  // Previews run beside the decode, so the number of ops varies a little from job to job (a
  // preview cancelled at the decode's end stops early): the fewest of three jobs, so that every
  // fault point below lands inside the job.
  std::shared_ptr<const mesh::Mesh> clean;
  ASSERT_TRUE(run(&clean).ok());
  int64_t ops_per_job = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < 3; ++i) {
    backend.arm(-1, false);
    ASSERT_TRUE(run(&clean).ok());
    ops_per_job = std::min<int64_t>(ops_per_job, backend.ops);
  }
  ASSERT_NE(clean, nullptr);
  ASSERT_GT(ops_per_job, 100);

  for (bool throws : {false, true}) {
    for (double where : {0.0, 0.1, 0.4, 0.7, 0.95}) {
      const auto at = static_cast<int64_t>(where * static_cast<double>(ops_per_job - 1));
      SCOPED_TRACE(std::string(throws ? "std::bad_alloc" : "kOutOfMemory") + " at op " +
                   std::to_string(at) + " of " + std::to_string(ops_per_job));
      backend.arm(at, throws);
      std::shared_ptr<const mesh::Mesh> none;
      const Status failed = run(&none);
      EXPECT_EQ(failed.code(), ErrorCode::kOutOfMemory) << failed.to_string();
      EXPECT_NE(failed.message().find("out of"), std::string::npos) << failed.message();
      EXPECT_EQ(none, nullptr) << "no final mesh from a failed job";

      backend.disarm();
      std::shared_ptr<const mesh::Mesh> again;
      const Status ok = run(&again);
      ASSERT_TRUE(ok.ok()) << ok.to_string();
      ASSERT_NE(again, nullptr);
      EXPECT_EQ(again->positions, clean->positions);
      EXPECT_EQ(again->triangles, clean->triangles);
    }
  }
}

TEST_F(SessionTest, SubmitCancelStormsDoNotCrashOrLoseJobs) {
  auto session = open_session(*dir_);
  ASSERT_NE(session, nullptr);
  std::set<uint64_t> submitted;
  // Two threads hammer the session while this one drains events.
  auto hammer = [&](int seed, std::vector<uint64_t>* ids) {
    std::mt19937 local(static_cast<uint32_t>(seed));
    for (int i = 0; i < 25; ++i) {
      if (local() % 3 == 0) {
        session->cancel();
      } else {
        JobOptions job = small_job(local() % 2 ? "a b" : "");
        job.preview_every = local() % 2 ? 4 : 0;
        job.generation.use_kv_cache = local() % 2;
        ids->push_back(session->submit(job));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(local() % 3000));
    }
  };
  std::vector<uint64_t> ids_a, ids_b;
  std::thread a(hammer, 1, &ids_a), b(hammer, 2, &ids_b);
  std::map<uint64_t, int> terminals;
  std::atomic<bool> hammering{true};
  std::thread drainer([&] {
    while (hammering.load() || !session->idle()) {
      if (auto e = session->wait_event(milliseconds(5))) {
        if (e->terminal()) ++terminals[e->job];
      }
    }
    while (auto e = session->poll()) {
      if (e->terminal()) ++terminals[e->job];
    }
  });
  a.join();
  b.join();
  hammering.store(false);
  drainer.join();
  submitted.insert(ids_a.begin(), ids_a.end());
  submitted.insert(ids_b.begin(), ids_b.end());
  for (uint64_t id : submitted) EXPECT_EQ(terminals[id], 1) << "job " << id;
  EXPECT_EQ(terminals.size(), submitted.size());

  // A session destroyed while a job runs cancels and joins it.
  session->submit(small_job());
  session.reset();
}

// ---- the runtime's other doors: decode jobs, loads, texture jobs, capabilities
// -------------------

TEST_F(SessionTest, DecodeJobTurnsGivenTokensIntoTheSameMesh) {
  auto session = open_session(*dir_);
  ASSERT_NE(session, nullptr);
  JobOptions job = small_job();
  const Event generated = session->wait_for(session->submit(job));
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(generated.payload));
  // Collect the final mesh of a generation, then decode its tokens.
  std::shared_ptr<const mesh::Mesh> from_generation;
  std::vector<int32_t> tokens;
  const Event again = session->wait_for(session->submit(job), [&](const Event& e) {
    if (const auto* f = std::get_if<FinalMeshEvent>(&e.payload)) {
      from_generation = f->mesh;
      tokens = f->tokens;
    }
  });
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(again.payload));
  ASSERT_NE(from_generation, nullptr);
  EXPECT_TRUE(session->check_tokens(tokens).ok());
  JobOptions decode;
  decode.tokens = tokens;
  decode.mesh.resolution = 17;
  std::vector<std::string> stages;
  std::shared_ptr<const mesh::Mesh> decoded;
  const Event end = session->wait_for(session->submit(decode), [&](const Event& e) {
    if (const auto* s = std::get_if<StageEvent>(&e.payload)) stages.push_back(s->name);
    if (const auto* f = std::get_if<FinalMeshEvent>(&e.payload)) decoded = f->mesh;
  });
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(end.payload));
  EXPECT_EQ(stages,
            (std::vector<std::string>{kStageLatentDecode, kStageExtraction, kStageCleanup}));
  ASSERT_NE(decoded, nullptr);
  EXPECT_EQ(decoded->positions, from_generation->positions);
  EXPECT_EQ(decoded->triangles, from_generation->triangles);
  // Bad tokens: an error naming the position, before and inside the job.
  std::vector<int32_t> bad = tokens;
  bad[3] = 1 << 20;
  const Status st = session->check_tokens(bad);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("position 3"), std::string::npos) << st.message();
  decode.tokens = bad;
  const Event failed = session->wait_for(session->submit(decode));
  const auto* error = std::get_if<ErrorEvent>(&failed.payload);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(error->status.message().find("position 3"), std::string::npos);
}

TEST_F(SessionTest, ReplayMeshesTheAskedPrefixesAsThePreviewsDo) {
  auto session = open_session(*dir_);
  ASSERT_NE(session, nullptr);
  JobOptions job = small_job();
  job.preview_every = 1;
  job.preview_budget = 1.0;  // every prefix meshed: the live previews to compare with
  std::map<int64_t, std::shared_ptr<const mesh::Mesh>> live;
  std::vector<int32_t> tokens;
  const Event done = session->wait_for(session->submit(job), [&](const Event& e) {
    if (const auto* p = std::get_if<PartialMeshEvent>(&e.payload)) live[p->tokens] = p->mesh;
    if (const auto* f = std::get_if<FinalMeshEvent>(&e.payload)) tokens = f->tokens;
  });
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(done.payload));
  ASSERT_FALSE(live.empty());
  const int64_t n = static_cast<int64_t>(tokens.size());
  // In the asked order, each once, the same meshes as the live previews of those prefixes.
  JobOptions replay;
  replay.tokens = tokens;
  replay.preview_resolution = job.preview_resolution;
  replay.replay_prefixes = {n, 1, live.begin()->first, n / 2};
  std::vector<int64_t> order;
  std::vector<std::shared_ptr<const mesh::Mesh>> meshes;
  bool final_mesh = false;
  const Event end = session->wait_for(session->submit(replay), [&](const Event& e) {
    if (const auto* p = std::get_if<PartialMeshEvent>(&e.payload)) {
      order.push_back(p->tokens);
      meshes.push_back(p->mesh);
    }
    if (std::holds_alternative<FinalMeshEvent>(e.payload)) final_mesh = true;
  });
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(end.payload));
  EXPECT_FALSE(final_mesh);
  ASSERT_EQ(order, replay.replay_prefixes);
  int compared = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_NE(meshes[i], nullptr);
    const auto it = live.find(order[i]);
    // Not every prefix was previewed live (the CPU mesher skips to the newest one).
    if (it == live.end()) continue;
    EXPECT_EQ(meshes[i]->positions, it->second->positions) << order[i] << " tokens";
    EXPECT_EQ(meshes[i]->triangles, it->second->triangles) << order[i] << " tokens";
    ++compared;
  }
  EXPECT_GE(compared, 1);
  // A prefix out of range, or a replay without tokens: an error naming it, before any work.
  replay.replay_prefixes = {n + 1};
  const Event rejected = session->wait_for(session->submit(replay));
  const auto* bad = std::get_if<ErrorEvent>(&rejected.payload);
  ASSERT_NE(bad, nullptr);
  EXPECT_NE(bad->status.message().find("replay prefix " + std::to_string(n + 1)), std::string::npos)
      << bad->status.message();
  replay.tokens.reset();
  replay.replay_prefixes = {1};
  const Event tokenless = session->wait_for(session->submit(replay));
  const auto* none = std::get_if<ErrorEvent>(&tokenless.payload);
  ASSERT_NE(none, nullptr);
  EXPECT_NE(none->status.message().find("tokens"), std::string::npos);
}

TEST_F(SessionTest, ModelLoadsAreJobsAndJobsWithoutAModelFailClearly) {
  SessionOptions options;
  auto session = Session::create(std::move(options));
  EXPECT_FALSE(session->shape_model().has_value());
  EXPECT_EQ(session->num_latents(), 0);
  // No model: a clear error, never a crash.
  const Event no_model = session->wait_for(session->submit(small_job()));
  const auto* e = std::get_if<ErrorEvent>(&no_model.payload);
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->status.message().find("no shape model"), std::string::npos);
  const Event no_image = session->wait_for(session->submit_image({}));
  ASSERT_TRUE(std::holds_alternative<ErrorEvent>(no_image.payload));
  EXPECT_EQ(no_image.lane, Lane::kImage);
  // A directory that is not a model: the loader's message names it.
  ShapeModelOptions missing;
  missing.path = "/nonexistent/tessera-model";
  const Event failed = session->wait_for(session->load_shape_model(missing));
  const auto* load_error = std::get_if<ErrorEvent>(&failed.payload);
  ASSERT_NE(load_error, nullptr);
  EXPECT_NE(load_error->status.message().find("/nonexistent/tessera-model"), std::string::npos);
  ImageModelOptions missing_image;
  missing_image.path = "/nonexistent/diffusion";
  const Event image_failed = session->wait_for(session->load_image_model(missing_image));
  ASSERT_TRUE(std::holds_alternative<ErrorEvent>(image_failed.payload));
  // The real load: ModelLoaded, then Done; the model's facts are then known.
  ShapeModelOptions model;
  model.path = dir_->path();
  bool loaded = false;
  const uint64_t load = session->load_shape_model(model);
  // A job submitted while the model loads is not lost: it runs on the new model.
  const uint64_t job = session->submit(small_job());
  const Event load_end = session->wait_for(load, [&](const Event& event) {
    loaded |= std::holds_alternative<ModelLoadedEvent>(event.payload);
  });
  EXPECT_TRUE(loaded);
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(load_end.payload));
  ASSERT_TRUE(session->shape_model().has_value());
  EXPECT_EQ(session->num_latents(), 16);
  EXPECT_FALSE(session->shape_model()->on_gpu);
  const Event job_end = session->wait_for(job);
  EXPECT_TRUE(std::holds_alternative<DoneEvent>(job_end.payload));
}

TEST_F(SessionTest, TextureJobsProjectAnImageOntoTheMesh) {
  auto session = open_session(*dir_);
  ASSERT_NE(session, nullptr);
  std::shared_ptr<const mesh::Mesh> shape;
  session->wait_for(session->submit(small_job()), [&](const Event& e) {
    if (const auto* f = std::get_if<FinalMeshEvent>(&e.payload)) shape = f->mesh;
  });
  ASSERT_NE(shape, nullptr);
  auto image = std::make_shared<mesh::TextureImage>();
  image->width = image->height = 16;
  image->rgb.assign(16 * 16 * 3, 200);
  TextureJobOptions job;
  job.mesh = shape;
  job.image = image;
  std::shared_ptr<const mesh::Mesh> textured;
  const Event end = session->wait_for(session->submit_texture(job), [&](const Event& e) {
    EXPECT_EQ(e.lane, Lane::kTexture);
    if (const auto* t = std::get_if<TexturedMeshEvent>(&e.payload)) textured = t->mesh;
  });
  ASSERT_TRUE(std::holds_alternative<DoneEvent>(end.payload));
  ASSERT_NE(textured, nullptr);
  EXPECT_FALSE(textured->texture.empty());
  EXPECT_EQ(textured->uvs.size(), 2 * static_cast<size_t>(textured->vertex_count()));
  EXPECT_TRUE(shape->uvs.empty());  // the input mesh is not touched
  // Bad input: an error, not a crash.
  job.image = nullptr;
  EXPECT_TRUE(
      std::holds_alternative<ErrorEvent>(session->wait_for(session->submit_texture(job)).payload));
}

TEST(SchedulerTest, ImageWorkWaitsWhileShapeJobsAreQueuedOrRunning) {
  Scheduler scheduler;
  std::atomic<bool> cancel{false};
  std::vector<bool> waits;
  auto on_wait = [&](bool waiting) { waits.push_back(waiting); };
  EXPECT_TRUE(scheduler.wait_image_turn(cancel, on_wait));  // nothing running: no wait
  EXPECT_TRUE(waits.empty());
  scheduler.shape_submitted(7);
  std::thread finisher([&] {
    std::this_thread::sleep_for(milliseconds(50));
    scheduler.shape_finished(7);
  });
  EXPECT_TRUE(scheduler.wait_image_turn(cancel, on_wait));
  finisher.join();
  EXPECT_EQ(waits, (std::vector<bool>{true, false}));
  // Not exclusive (the engines on different devices): no wait.
  scheduler.shape_submitted(8);
  scheduler.set_exclusive(false);
  waits.clear();
  EXPECT_TRUE(scheduler.wait_image_turn(cancel, on_wait));
  EXPECT_TRUE(waits.empty());
  // Cancelled while waiting: returns false.
  scheduler.set_exclusive(true);
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(30));
    cancel.store(true);
  });
  EXPECT_FALSE(scheduler.wait_image_turn(cancel, on_wait));
  canceller.join();
  scheduler.shape_finished(999);  // an unknown id is a no-op
}

TEST(CapabilitiesTest, SaysWhatIsUsableAndWhyNot) {
  const Capabilities c = probe_capabilities();
  EXPECT_TRUE(c.cpu.usable);
  EXPECT_FALSE(c.cpu.name.empty());
  if (!c.cuda.usable) {
    EXPECT_FALSE(c.cuda.reason.empty());
    EXPECT_FALSE(c.decode_graphs_available);
    EXPECT_FALSE(c.decode_graphs_reason.empty());
    EXPECT_EQ(c.auto_device, DeviceChoice::kCpu);
  }
  EXPECT_GT(memory_use(false).resident_bytes, 0);
  EXPECT_NE(default_shape_model_dir().find("models/tessera-tiny"), std::string::npos);
  EXPECT_NE(default_diffusion_model_dir().find("tessera-tiny/diffusion"), std::string::npos);
  EXPECT_EQ(tokens_to_generate(0, 512), 512);
  EXPECT_EQ(tokens_to_generate(64, 512), 64);
  EXPECT_TRUE(parse_sampler("euler_a").ok());
  EXPECT_FALSE(parse_sampler("ddim").ok());
  EXPECT_FALSE(parse_device("tpu").ok());
}

// The weights choices: names both ways, what auto and fast resolve to (fast: int8 on the CPU,
// bf16 on a GPU; auto on tessera-tiny: f32, a small model), a bad name listed with the choices.
TEST(ShapeWeightsTest, FastIsInt8OnTheCpuAndBf16OnAGpu) {
  for (ShapeWeights w : {ShapeWeights::kAuto, ShapeWeights::kFast, ShapeWeights::kF32,
                         ShapeWeights::kBF16, ShapeWeights::kInt8}) {
    auto parsed = parse_shape_weights(shape_weights_name(w));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, w);
  }
  const auto bad = parse_shape_weights("int4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'int4': expected auto, fast,"), std::string::npos)
      << bad.status().message();
  const std::string tiny = default_shape_model_dir();
  auto resolved = [&](ShapeWeights w, DeviceChoice device) {
    auto r = resolve_shape_weights(tiny, w, device);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : ShapeWeights::kAuto;
  };
  EXPECT_EQ(resolved(ShapeWeights::kFast, DeviceChoice::kCpu), ShapeWeights::kInt8);
  EXPECT_EQ(resolved(ShapeWeights::kFast, DeviceChoice::kCuda), ShapeWeights::kBF16);
  // On a machine without a usable GPU (CI) auto is the CPU: int8.
  const ShapeWeights on_auto = probe_capabilities().auto_device == DeviceChoice::kCuda
                                   ? ShapeWeights::kBF16
                                   : ShapeWeights::kInt8;
  EXPECT_EQ(resolved(ShapeWeights::kFast, DeviceChoice::kAuto), on_auto);
  EXPECT_EQ(resolved(ShapeWeights::kAuto, DeviceChoice::kCpu), ShapeWeights::kF32);
  EXPECT_EQ(resolved(ShapeWeights::kBF16, DeviceChoice::kCpu), ShapeWeights::kBF16);
}

}  // namespace
}  // namespace tessera::runtime
