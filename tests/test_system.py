"""system: provenance. A git sha only when the package's own files are tracked at that commit (a copy dropped into
another repository's work tree names none of its commits); +dirty when they differ; source_sha256 always."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from floorline.bench import system

PKG = system.PACKAGE
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    import os

    return subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def host_repo(tmp_path) -> tuple[Path, Path]:
    """Another repository with a commit of its own, and a copy of the package inside its work tree (untracked)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "other"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README").write_text("another project\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "theirs")
    pkg = repo / "vendored" / "floorline"
    shutil.copytree(PKG, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return repo, pkg


def test_a_copy_inside_another_repository_names_no_commit(host_repo):
    repo, pkg = host_repo
    assert system.git_sha(pkg) is None
    assert system.source_sha256(pkg) == system.source_sha256(PKG)  # which code ran, whatever git says


def test_tracked_clean_dirty_and_untracked_sources(host_repo):
    repo, pkg = host_repo
    git(repo, "add", "vendored")
    git(repo, "commit", "-q", "-m", "the package, tracked")
    head = git(repo, "rev-parse", "HEAD")
    assert system.git_sha(pkg) == head
    (pkg / "__pycache__").mkdir(exist_ok=True)
    (pkg / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert system.git_sha(pkg) == head  # build litter is not a change of the sources
    (pkg / "new_module.py").write_text("x = 1\n")
    assert system.git_sha(pkg) == head + "+dirty"  # a source the commit lacks
    (pkg / "new_module.py").unlink()
    (pkg / "core" / "zoo.py").write_text((pkg / "core" / "zoo.py").read_text() + "\n# changed\n")
    assert system.git_sha(pkg) == head + "+dirty"


def test_outside_any_repository(tmp_path):
    pkg = tmp_path / "floorline"
    shutil.copytree(PKG, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    assert system.git_sha(pkg) is None
    assert len(system.source_sha256(pkg)) == 16
