"""The code a training run ran: the git state every stage records in its `<stage>_done.json`.

`git_state()` is called once when a training entry point starts (train_autoencoder.py, train_gpt.py,
diffusion/train_vae.py, diffusion/train_unet.py) and its fields are merged into the done record:

- `git_commit`: the full hash of HEAD of the repository holding these tools (`git rev-parse HEAD`), or
  null when that folder is not a git checkout (an unpacked tarball, git missing, a repository git
  refuses to read); then `git_commit_reason` says why.
- `git_dirty`: true when `git status --porcelain` shows changes to tracked files under tools/ or
  scripts/ (the run's scripts differed from the commit: a checkout of `git_commit` does not give back
  what ran), false when they match, null with the commit. Untracked files and changes elsewhere
  (engine/, docs) do not count: they cannot change what a training script does.

A run resumed over several sessions records the state of the session that finished it; every session
also logs its state as the first line of the stage's log (`log_line()`).

Checkpoints never enter git (see tools/train/README.md: a run's record is its start script, logs,
metrics, done records and sheets; the commit here is how to get the scripts back).
"""

import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIRTY_PATHS = ("tools", "scripts")


def _git(repo, *args):
    """(returncode, stdout, stderr) of `git -C repo args`; FileNotFoundError when git is missing."""
    p = subprocess.run(["git", "-C", repo, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=60)
    return p.returncode, p.stdout.strip(), p.stderr.strip()


def git_state(repo=REPO, paths=DIRTY_PATHS):
    """{"git_commit": <40 hex> | None, "git_dirty": bool | None[, "git_commit_reason": str]} of `repo`.
    Never raises: a run must not fail because its provenance cannot be read."""
    try:
        rc, out, err = _git(repo, "rev-parse", "--show-toplevel")
        if rc != 0:
            return _unknown(f"{repo} is not in a git checkout ({err or 'git rev-parse failed'})")
        top = out
        rc, head, err = _git(top, "rev-parse", "--verify", "HEAD")
        if rc != 0:
            return _unknown(f"{top}: no commit at HEAD ({err or 'git rev-parse HEAD failed'})")
        rc, status, err = _git(top, "status", "--porcelain", "--untracked-files=no", "--", *paths)
        if rc != 0:
            return {"git_commit": head, "git_dirty": None,
                    "git_commit_reason": f"git status failed in {top}: {err}"}
        return {"git_commit": head, "git_dirty": bool(status)}
    except FileNotFoundError:
        return _unknown("git is not installed")
    except (OSError, subprocess.SubprocessError) as e:
        return _unknown(f"git could not run: {e}")


def _unknown(reason):
    return {"git_commit": None, "git_dirty": None, "git_commit_reason": reason}


def log_line(state):
    """One log line for the start of a session: `git HEAD <hash> (scripts under tools/ scripts/ ...)`."""
    if state["git_commit"] is None:
        return f"git: commit unknown ({state.get('git_commit_reason')})"
    dirty = {True: "MODIFIED against it", False: "as committed", None: "state unknown"}[state["git_dirty"]]
    return f"git: HEAD {state['git_commit']}, scripts under {'/ '.join(DIRTY_PATHS)}/ {dirty}"
