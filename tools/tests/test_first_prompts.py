"""tools/train/first_prompts.tsv and the checks of tools/train/first_prompts.py (issue 22): the prompt set
parses, covers every family with its "a <family>" and bare prompt, uses only known checks and groups, and
the cube / tall / flat / hole checks read grid features as documented. Fast (no model is loaded).
Run: /usr/bin/python3 -m unittest tools/tests/test_first_prompts.py (repo root)."""
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from shapes.captions import article  # noqa: E402
from shapes.families import FAMILIES  # noqa: E402
from train import first_prompts  # noqa: E402


class FirstPromptsTsvTest(unittest.TestCase):
    def setUp(self):
        self.rows = first_prompts.load_prompts()

    def test_size_and_groups(self):
        self.assertGreaterEqual(len(self.rows), 80)
        self.assertEqual({r["group"] for r in self.rows}, set(first_prompts.GROUPS))
        self.assertTrue({r["check"] for r in self.rows if r["check"]} <= set(first_prompts.CHECKS))

    def test_every_family_has_its_a_family_and_bare_prompt(self):
        by = {(r["group"], r["prompt"]): r["family"] for r in self.rows}
        for fam in FAMILIES:
            self.assertEqual(by.get(("a-family", f"{article(fam)} {fam}")), fam)
            self.assertEqual(by.get(("bare", fam)), fam)
        self.assertEqual(sum(r["group"] == "a-family" for r in self.rows), len(FAMILIES))

    def test_hole_families_are_checked(self):
        for r in self.rows:
            if r["group"] in ("a-family", "bare") and r["family"] in ("torus", "ring", "mug"):
                self.assertEqual(r["check"], "hole", r["prompt"])

    def test_malformed_rows_are_refused(self):
        for bad in ("sphere\ta ball\t-\n", "spheroid\ta ball\t-\tsynonym\n", "sphere\ta ball\tround\tsize\n",
                    "sphere\ta ball\t-\tmisc\n", "sphere\ta ball\t-\tsize\nsphere\ta ball\t-\tbare\n"):
            with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
                f.write("# comment\n" + bad)
            try:
                with self.assertRaises(ValueError):
                    first_prompts.load_prompts(f.name)
            finally:
                os.unlink(f.name)


class ChecksTest(unittest.TestCase):
    def info(self, w, h, d, euler=1):
        return {"extents": [w, h, d], "euler": euler, "empty": False}

    def test_checks(self):
        ok = first_prompts.check_ok
        self.assertIsNone(ok(None, self.info(1, 1, 1)))
        self.assertTrue(ok("cube", self.info(1.0, 1.4, 1.2)))
        self.assertFalse(ok("cube", self.info(1.0, 1.6, 1.2)))
        self.assertTrue(ok("tall", self.info(0.5, 1.6, 0.4)))
        self.assertFalse(ok("tall", self.info(0.5, 0.7, 0.4)))
        self.assertTrue(ok("flat", self.info(1.0, 0.4, 0.5)))
        self.assertFalse(ok("flat", self.info(1.0, 0.5, 0.5)))
        self.assertTrue(ok("hole", self.info(1, 1, 1, euler=0)))
        self.assertFalse(ok("hole", self.info(1, 1, 1, euler=1)))
        self.assertFalse(ok("cube", {"extents": [0, 0, 0], "euler": 0, "empty": True}))

    def test_summary_counts_groups(self):
        res = [{"group": "bare", "match": True, "check": "hole", "check_ok": False, "prompt": "torus"},
               {"group": "bare", "match": True, "check": None, "check_ok": None, "prompt": "cone"},
               {"group": "size", "match": False, "check": None, "check_ok": None, "prompt": "a big cone"}]
        s = first_prompts.summarise(res)
        self.assertEqual(s["groups"]["bare"]["family_match"], 2)
        self.assertEqual(s["groups"]["bare"]["checks_passed"], "0/1")
        self.assertEqual(s["all"]["all_ok"], 1)
        self.assertEqual(s["failures"], ["torus", "a big cone"])


if __name__ == "__main__":
    unittest.main()
