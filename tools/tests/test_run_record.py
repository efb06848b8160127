"""tools/train/run_record.py: the git state a training run records in its done.json.
- in a clean checkout: the full hash of HEAD, git_dirty false (untracked files and changes outside
  tools/ and scripts/ do not count);
- a modified tracked file under tools/ (or scripts/) -> git_dirty true, same commit;
- outside a git checkout, or in a repository without a commit: git_commit null with the reason.
(That a training entry point writes these fields: test_train_phases.py, test_train_vae.py.)
Run: /usr/bin/python3 -m unittest tools/tests/test_run_record.py (repo root)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from train import run_record  # noqa: E402


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, "-c", "user.name=test", "-c", "user.email=test@example.com",
                           "-c", "commit.gpgsign=false", *args], check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True).stdout.strip()


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


@unittest.skipIf(shutil.which("git") is None, "git is not installed")
class RunRecordTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tessera-run-record-")
        # git must not find a repository above the temporary folder (a TMPDIR inside a checkout)
        self.env = os.environ.get("GIT_CEILING_DIRECTORIES")
        os.environ["GIT_CEILING_DIRECTORIES"] = os.path.dirname(self.tmp)
        self.repo = os.path.join(self.tmp, "repo")
        os.makedirs(self.repo)
        git(self.repo, "init", "-q")
        write(os.path.join(self.repo, "tools", "train", "train_x.py"), "print('v1')\n")
        write(os.path.join(self.repo, "scripts", "setup.sh"), "echo v1\n")
        write(os.path.join(self.repo, "engine", "x.cpp"), "int x;\n")
        git(self.repo, "add", ".")
        git(self.repo, "commit", "-q", "-m", "first")
        self.head = git(self.repo, "rev-parse", "HEAD")

    def tearDown(self):
        if self.env is None:
            os.environ.pop("GIT_CEILING_DIRECTORIES", None)
        else:
            os.environ["GIT_CEILING_DIRECTORIES"] = self.env
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_clean_checkout(self):
        self.assertEqual(len(self.head), 40)
        self.assertEqual(run_record.git_state(self.repo), {"git_commit": self.head, "git_dirty": False})
        # from a subfolder of the checkout too (the tools' own folder is what the scripts pass)
        self.assertEqual(run_record.git_state(os.path.join(self.repo, "tools", "train"))["git_commit"], self.head)

    def test_untracked_and_other_folders_do_not_count(self):
        write(os.path.join(self.repo, "tools", "train", "new_untracked.py"), "x = 1\n")
        write(os.path.join(self.repo, "engine", "x.cpp"), "int y;\n")
        self.assertEqual(run_record.git_state(self.repo), {"git_commit": self.head, "git_dirty": False})

    def test_modified_tracked_file_under_tools_is_dirty(self):
        write(os.path.join(self.repo, "tools", "train", "train_x.py"), "print('v2')\n")
        self.assertEqual(run_record.git_state(self.repo), {"git_commit": self.head, "git_dirty": True})
        self.assertIn("MODIFIED", run_record.log_line(run_record.git_state(self.repo)))

    def test_staged_change_under_scripts_is_dirty(self):
        write(os.path.join(self.repo, "scripts", "setup.sh"), "echo v2\n")
        git(self.repo, "add", "scripts/setup.sh")
        self.assertTrue(run_record.git_state(self.repo)["git_dirty"])

    def test_outside_a_checkout_is_null_with_reason(self):
        plain = os.path.join(self.tmp, "plain")
        os.makedirs(plain)
        state = run_record.git_state(plain)
        self.assertIsNone(state["git_commit"])
        self.assertIsNone(state["git_dirty"])
        self.assertIn("not in a git checkout", state["git_commit_reason"])
        self.assertIn(plain, state["git_commit_reason"])
        self.assertIn("unknown", run_record.log_line(state))

    def test_repository_without_commit_is_null_with_reason(self):
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        git(empty, "init", "-q")
        state = run_record.git_state(empty)
        self.assertIsNone(state["git_commit"])
        self.assertIn("no commit", state["git_commit_reason"])

    def test_this_repository(self):
        """The helper's default is the checkout holding tools/ (CI runs the tests in a clean clone)."""
        os.environ.pop("GIT_CEILING_DIRECTORIES", None)
        state = run_record.git_state()
        if state["git_commit"] is None:
            self.assertTrue(state["git_commit_reason"])
        else:
            self.assertEqual(state["git_commit"], git(ROOT, "rev-parse", "HEAD"))
            self.assertIsInstance(state["git_dirty"], bool)


if __name__ == "__main__":
    unittest.main()
