// STL and 3MF export/import (stl.h, threemf.h) and the mesh check behind `tessera check`
// (check.h), issue 24: round trips keep the geometry and topology; malformed files get errors that
// name the file (and the line for ASCII STL); the check finds holes, non-manifold edges, genus,
// volume and self-intersections on meshes whose answers are known.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/mesh/check.h"
#include "engine/mesh/export.h"
#include "engine/mesh/extraction.h"
#include "engine/mesh/mesh.h"
#include "engine/mesh/stl.h"
#include "engine/mesh/threemf.h"

namespace tessera::mesh {
namespace {

// The [-1, 1]^3 cube (shifted by `offset` on x), 8 shared vertices, outward CCW triangles.
Mesh cube(float offset = 0.0f, float half = 1.0f) {
  Mesh m;
  for (int i = 0; i < 8; ++i) {
    m.positions.push_back((i & 1 ? half : -half) + offset);
    m.positions.push_back(i & 2 ? half : -half);
    m.positions.push_back(i & 4 ? half : -half);
  }
  const uint32_t quads[6][4] = {{4, 5, 7, 6}, {1, 0, 2, 3}, {0, 4, 6, 2},
                                {5, 1, 3, 7}, {6, 7, 3, 2}, {0, 1, 5, 4}};
  for (const auto& q : quads)
    m.triangles.insert(m.triangles.end(), {q[0], q[1], q[2], q[0], q[2], q[3]});
  return m;
}

Mesh merged(const Mesh& a, const Mesh& b) {
  Mesh m = a;
  const auto base = static_cast<uint32_t>(a.vertex_count());
  m.positions.insert(m.positions.end(), b.positions.begin(), b.positions.end());
  for (uint32_t i : b.triangles) m.triangles.push_back(base + i);
  return m;
}

// A torus (R = 0.6, r = 0.25) from the analytic field: genus 1.
Mesh torus() {
  ExtractionOptions o;
  o.resolution_base = 5;
  auto m = extract_dense(
      [](const float* p, int64_t n, float* out) {
        for (int64_t i = 0; i < n; ++i) {
          const float q = std::sqrt(p[3 * i] * p[3 * i] + p[3 * i + 2] * p[3 * i + 2]) - 0.6f;
          out[i] = 10.0f * (0.25f - std::sqrt(q * q + p[3 * i + 1] * p[3 * i + 1]));
        }
        return Status();
      },
      o);
  EXPECT_TRUE(m.ok());
  return m.ok() ? std::move(*m) : Mesh();
}

TEST(StlTest, BinaryRoundTripKeepsTheMeshAndItsTopology) {
  const Mesh t = torus();
  ASSERT_GT(t.triangle_count(), 500);
  auto bytes = to_stl(t);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  EXPECT_EQ(bytes->size(), 84u + 50u * static_cast<size_t>(t.triangle_count()));
  EXPECT_NE(bytes->substr(0, 5), "solid");  // never mistaken for ASCII
  auto back = parse_stl(*bytes, "t.stl");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->triangle_count(), t.triangle_count());
  EXPECT_EQ(back->vertex_count(), t.vertex_count());  // corners welded back into vertices
  EXPECT_NEAR(signed_volume(*back), signed_volume(t), 1e-9);
  const Topology topo = compute_topology(*back);
  EXPECT_TRUE(topo.watertight());
  EXPECT_EQ(topo.euler_characteristic, 0);
  // The facet normal of the first triangle is the unit right-hand normal.
  float n[3];
  std::memcpy(n, bytes->data() + 84, 12);
  EXPECT_NEAR(std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]), 1.0, 1e-5);
}

TEST(StlTest, AsciiIsRead) {
  const std::string text =
      "solid tri\n facet normal 0 0 1\n  outer loop\n   vertex 0 0 0\n   vertex 1 0 0\n"
      "   vertex 0 1 0\n  endloop\n endfacet\n facet normal 0 0 1\n  outer loop\n"
      "   vertex 1 0 0\n   vertex 1 1 0\n   vertex 0 1 0\n  endloop\n endfacet\nendsolid tri\n";
  auto m = parse_stl(text, "a.stl");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->triangle_count(), 2);
  EXPECT_EQ(m->vertex_count(), 4);
}

TEST(StlTest, MalformedFilesAreErrorsNamingTheFile) {
  std::string good = *to_stl(cube());
  struct Case {
    std::string bytes, expect;
  };
  std::string nan_corner = good;
  const float nan = NAN;
  std::memcpy(nan_corner.data() + 84 + 12, &nan, 4);
  std::string count_lies = good;
  count_lies[80] = 99;
  const std::vector<Case> cases = {
      {good.substr(0, good.size() - 7), "cannot hold"},
      {count_lies, "cannot hold"},
      {nan_corner, "non-finite"},
      {"", "not an STL"},
      {"solid x\n facet normal 0 0 1\n outer loop\n vertex 0 0 zero\n", "line 4"},
      {"solid x\n facet normal 0 0 1\n outer loop\n vertex 0 0 0\n", "line"},
      {"solid x\nendsolid x\n", "no triangles"},
      {"solid x\n facet normal 0 0 1\n outer loop\n vertex 0 0 0\n vertex 1 0 0\n vertex 0 1 0\n"
       " vertex 1 1 1\n endloop\n endfacet\nendsolid\n",
       "endloop"},
  };
  for (const Case& c : cases) {
    auto m = parse_stl(c.bytes, "bad.stl");
    ASSERT_FALSE(m.ok()) << c.expect;
    EXPECT_NE(m.status().message().find("bad.stl"), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos) << m.status().message();
  }
}

TEST(ThreeMfTest, RoundTripThroughLib3mf) {
  if (!have_3mf()) GTEST_SKIP() << "built without lib3mf";
  const Mesh t = torus();
  ExportOptions o;
  o.scale = 2.0f;
  auto bytes = to_3mf(t, o, {{"Title", "a torus"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  EXPECT_EQ(bytes->substr(0, 2), "PK");
  auto back = parse_3mf(*bytes, "t.3mf");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->unit_metres, 1.0);
  EXPECT_EQ(back->mesh.triangle_count(), t.triangle_count());
  EXPECT_EQ(back->mesh.vertex_count(), t.vertex_count());
  EXPECT_NEAR(signed_volume(back->mesh), 8.0 * signed_volume(t), 1e-4 * 8.0 * signed_volume(t));
  bool title = false, application = false;
  for (const auto& [k, v] : back->metadata) {
    title |= k == "Title" && v == "a torus";
    application |= k == "Application" && v.rfind("Tessera ", 0) == 0;
  }
  EXPECT_TRUE(title);
  EXPECT_TRUE(application);
  EXPECT_TRUE(compute_topology(back->mesh).watertight());
}

// XML's special characters in metadata (a prompt is anything the user typed): lib3mf 1.8 writes and
// reads the value verbatim, so Tessera escapes and unescapes it; before, "<cube>" vanished on the
// way back and a long value with a '<' made the file unreadable (found by job_path_fuzz), and other
// readers refused the malformed XML. Entities already in a value stay as they were typed.
TEST(ThreeMfTest, MetadataWithXmlSpecialCharactersRoundTrips) {
  if (!have_3mf()) GTEST_SKIP() << "built without lib3mf";
  std::string long_value;
  for (int i = 0; i < 40; ++i) long_value += "a tall lamp ";
  long_value += "<a tall lamp> & more";
  const std::vector<std::string> values = {"a <cube> & box", "quotes \" and ' here",
                                           "typed entities &lt; &amp; &#65; stay", long_value,
                                           "caf\xc3\xa9 \xe2\x9c\x93 <\xf0\x9f\x8e\xb2>"};
  for (const std::string& v : values) {
    SCOPED_TRACE(v.substr(0, 40));
    auto bytes = to_3mf(cube(), {}, {{"Description", v}});
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    auto back = parse_3mf(*bytes, "m.3mf");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    bool found = false;
    for (const auto& [k, got] : back->metadata) {
      if (k == "Description") {
        EXPECT_EQ(got, v);
        found = true;
      }
    }
    EXPECT_TRUE(found);
  }
}

TEST(ThreeMfTest, MalformedPackagesAreErrorsNamingTheFile) {
  if (!have_3mf()) GTEST_SKIP() << "built without lib3mf";
  std::string good = *to_3mf(cube());
  for (const std::string& bad :
       {std::string("not a zip"), good.substr(0, good.size() / 2), std::string("PK\x03\x04junk")}) {
    auto m = parse_3mf(bad, "bad.3mf");
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("bad.3mf"), std::string::npos) << m.status().message();
  }
}

TEST(MeshCheckTest, AClosedCubeAndATorus) {
  const MeshReport c = check_mesh(cube());
  EXPECT_TRUE(c.watertight());
  EXPECT_EQ(c.genus, 0);
  EXPECT_NEAR(c.volume, 8.0, 1e-9);
  EXPECT_NEAR(c.area, 24.0, 1e-9);
  EXPECT_EQ(c.topology.components, 1);
  EXPECT_EQ(c.intersecting_pairs, 0);
  EXPECT_TRUE(c.intersection_check_complete);

  const MeshReport t = check_mesh(torus());
  EXPECT_TRUE(t.watertight());
  EXPECT_EQ(t.genus, 1);
  EXPECT_EQ(t.intersecting_pairs, 0);
  EXPECT_GT(t.pairs_tested, 0);
}

TEST(MeshCheckTest, HolesNonManifoldEdgesAndSelfIntersectionsAreFound) {
  Mesh open = cube();
  open.triangles.resize(open.triangles.size() - 6);  // no bottom face
  const MeshReport o = check_mesh(open);
  EXPECT_FALSE(o.watertight());
  EXPECT_EQ(o.topology.boundary_edges, 4);
  EXPECT_EQ(o.genus, -1);

  Mesh fan = cube();  // a third triangle on the edge 0-4 of the cube
  fan.positions.insert(fan.positions.end(), {-3.0f, -3.0f, 0.0f});
  fan.triangles.insert(fan.triangles.end(), {0, 4, 8});
  const MeshReport f = check_mesh(fan);
  EXPECT_FALSE(f.watertight());
  EXPECT_EQ(f.topology.non_manifold_edges, 1);

  // Two cubes that overlap: both closed, but their surfaces cross.
  const MeshReport x = check_mesh(merged(cube(), cube(1.0f)));
  EXPECT_TRUE(x.closed());
  EXPECT_EQ(x.topology.components, 2);
  EXPECT_GT(x.intersecting_pairs, 0);
  // Apart, they do not.
  const MeshReport apart = check_mesh(merged(cube(), cube(3.0f)));
  EXPECT_EQ(apart.intersecting_pairs, 0);
  EXPECT_EQ(apart.genus, 0);
  EXPECT_NEAR(apart.volume, 16.0, 1e-9);

  // Inside out: negative volume, still closed.
  Mesh inverted = cube();
  for (size_t i = 0; i < inverted.triangles.size(); i += 3) {
    std::swap(inverted.triangles[i + 1], inverted.triangles[i + 2]);
  }
  EXPECT_LT(check_mesh(inverted).volume, 0.0);

  // The bounded check says when it stopped.
  CheckOptions tight;
  tight.max_pair_tests = 1;
  EXPECT_FALSE(check_mesh(merged(cube(), cube(1.0f)), tight).intersection_check_complete);
}

}  // namespace
}  // namespace tessera::mesh
