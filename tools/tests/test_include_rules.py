"""tools/check_include_rules.py: each rule catches a violation in a synthetic tree, a clean tree
passes, and the repository itself passes."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, 'tools'))
import check_include_rules as rules  # noqa: E402


class IncludeRulesTest(unittest.TestCase):
    def test_each_rule(self):
        bad = [
            ('ui/studio/a.cpp', 'kernels/backend.h'),
            ('ui/studio/a.cpp', 'engine/diffusion/pipeline.h'),
            ('app/cli/a.cpp', 'engine/shape/pipeline.h'),
            ('app/cli/a.cpp', 'engine/text/clip_tokenizer.h'),
            ('app/cli/a.cpp', 'engine/weights/weight_store.h'),
            ('bench/a.cpp', 'kernels/cpu/linear_internal.h'),
            ('kernels/cpu/a.cpp', 'engine/shape/gpt.h'),
            ('kernels/cpu/a.cpp', 'engine/core/tensor.h'),
            ('core/a.h', 'kernels/ops.h'),
            ('core/a.h', 'engine/shape/gpt.h'),
            ('core/a.h', 'ui/render/renderer.h'),
            ('engine/mesh/a.cpp', 'bench/common.h'),
            ('bench/a.cpp', 'ui/render/renderer.h'),
            ('engine/shape/a.cpp', 'ui/render/renderer.h'),
        ]
        for src, inc in bad:
            self.assertIsNotNone(rules.check_include(src, inc), f'{src} -> {inc}')
        good = [
            ('ui/studio/a.cpp', 'engine/runtime/session.h'),
            ('ui/studio/a.cpp', 'engine/mesh/mesh.h'),
            ('app/cli/a.cpp', 'core/status.h'),
            ('bench/a.cpp', 'kernels/cpu/linear_config.h'),
            ('bench/a.cpp', 'engine/shape/gpt.h'),
            ('kernels/cpu/a.cpp', 'core/tensor.h'),
            ('engine/shape/a.cpp', 'kernels/ops.h'),
            ('kernels/cpu/linear.cpp', 'kernels/cpu/linear_internal.h'),
            ('tests/kernels/a.cpp', 'kernels/cpu/linear_internal.h'),
        ]
        for src, inc in good:
            self.assertIsNone(rules.check_include(src, inc), f'{src} -> {inc}')

    def test_synthetic_tree(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, 'ui', 'studio'))
            path = os.path.join(root, 'ui', 'studio', 'x.cpp')
            with open(path, 'w') as f:
                f.write('#include "engine/runtime/session.h"\n')
            self.assertEqual(rules.scan(root), [])
            with open(path, 'a') as f:
                f.write('#include "kernels/cuda/device.h"\n')
            found = rules.scan(root)
            self.assertEqual(len(found), 1)
            self.assertIn('ui/studio/x.cpp:2', found[0])
            with open(os.path.join(root, 'NOTES.md'), 'w') as f:
                f.write('see /work/shared/spec/fbx.md\n')
            self.assertEqual(len(rules.scan(root)), 2)

    def test_a_front_end_reaches_no_model_or_kernel_header(self):
        with tempfile.TemporaryDirectory() as root:
            def write(rel, text):
                os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(root, rel), 'w') as f:
                    f.write(text)
            write('engine/runtime/session.h', '#include "engine/mesh/mesh.h"\n')
            write('engine/mesh/mesh.h', '#include "core/status.h"\n')
            write('core/status.h', '')
            write('engine/shape/pipeline.h', '#include "kernels/ops.h"\n')
            write('kernels/ops.h', '')
            write('app/cli/x.cpp', '#include "engine/runtime/session.h"\n')
            self.assertEqual(rules.scan(root), [])
            # A runtime header that includes a model header opens the door two levels down.
            write('engine/mesh/mesh.h', '#include "core/status.h"\n'
                                        '#include "engine/shape/pipeline.h"\n')
            found = rules.scan(root)
            self.assertEqual(len(found), 1, found)
            self.assertIn('app/cli/x.cpp', found[0])
            self.assertIn('engine/shape/pipeline.h', found[0])
            self.assertIn('engine/runtime/session.h -> engine/mesh/mesh.h', found[0])

    def test_cited_documents_must_be_in_the_repository(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, 'engine', 'shape'))
            os.makedirs(os.path.join(root, 'docs'))
            with open(os.path.join(root, 'docs', 'cube3d.md'), 'w') as f:
                f.write('# Cube 3D\n')
            header = os.path.join(root, 'engine', 'shape', 'gpt.h')
            with open(header, 'w') as f:
                f.write('// Computation (docs/cube3d.md).\n')
            self.assertEqual(rules.scan(root), [])
            with open(header, 'a') as f:
                f.write('// Config (spec/cube3d.md), house style (ARCHITECTURE.md).\n')
            found = rules.scan(root)
            self.assertEqual(len(found), 2, found)
            self.assertIn('engine/shape/gpt.h:2', found[0])
            self.assertIn('spec/cube3d.md', found[0])
            self.assertIn('ARCHITECTURE.md', found[1])

    def test_front_ends_link_only_the_runtime(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, 'app', 'cli'))
            cmake = os.path.join(root, 'app', 'cli', 'CMakeLists.txt')
            with open(cmake, 'w') as f:
                f.write('add_executable(t main.cpp)\n'
                        'target_link_libraries(t PRIVATE tessera_runtime tessera_mesh\n'
                        '  tessera_core CLI11::CLI11)  # not tessera_kernels: a comment\n')
            self.assertEqual(rules.scan(root), [])
            with open(cmake, 'a') as f:
                f.write('target_link_libraries(t PRIVATE\n  tessera_kernels_cuda)\n')
            found = rules.scan(root)
            self.assertEqual(len(found), 1, found)
            self.assertIn('app/cli/CMakeLists.txt:4', found[0])
            self.assertIn('tessera_kernels_cuda', found[0])

    def test_the_drawing_has_no_arrow_pointing_up(self):
        # The repository's folders, drawn: every arrow goes from a higher folder to a lower one.
        edges = rules.folder_graph(rules.includes_of(ROOT))
        self.assertIn(('kernels', 'core'), edges)
        self.assertIn(('engine', 'kernels'), edges)
        for (a, b), n in edges.items():
            self.assertLess(rules.FOLDER_RANK[b], rules.FOLDER_RANK[a], f'{a}/ -> {b}/ ({n} includes)')
        self.assertNotIn('POINTS UP', rules.draw(edges))
        # And a drawing with an arrow up says so.
        self.assertIn('POINTS UP', rules.draw({('kernels', 'engine'): 41}))

    def test_repository_follows_the_rules(self):
        result = subprocess.run([sys.executable, os.path.join(ROOT, 'tools', 'check_include_rules.py'),
                                 ROOT], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


if __name__ == '__main__':
    unittest.main()
