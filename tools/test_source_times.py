"""Tests of tools/source-times.py against real git clones: a time is given back only to a file
whose content is unchanged, and never when something built after the record."""

import os
import pathlib
import subprocess
import sys
import tempfile
import time
import unittest

TOOL = pathlib.Path(__file__).resolve().parent / "source-times.py"
# Older than anything a clone made now has: a restored time is told from the clone's at a glance.
BUILT_AT_NS = 1_600_000_000_123_456_789


def git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def source_times(cwd, action, build_dir):
    return subprocess.run(
        [sys.executable, str(TOOL), action, str(build_dir)],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stderr


def mtime(path):
    return path.stat().st_mtime_ns


class SourceTimes(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        top = pathlib.Path(self.tmp.name)
        self.origin = top / "origin"
        (self.origin / "src").mkdir(parents=True)
        (self.origin / "src" / "lib.rs").write_text("pub fn kept() {}\n")
        (self.origin / "src" / "main.rs").write_text("fn main() {}\n")
        git(self.origin, "init", "-q")
        git(self.origin, "add", ".")
        git(self.origin, "commit", "-qm", "first")
        self.build_dir = top / "cache"
        self.fingerprint = self.build_dir / "debug" / ".fingerprint" / "crate-0123"
        self.fingerprint.mkdir(parents=True)
        self.top = top

    def tearDown(self):
        self.tmp.cleanup()

    def clone(self, name):
        git(self.top, "clone", "-q", str(self.origin), name)
        return self.top / name

    def built_and_recorded(self):
        """A first clone whose files carry BUILT_AT_NS, built (a fingerprint) and recorded."""
        first = self.clone("first")
        for path in (first / "src").iterdir():
            os.utime(path, ns=(BUILT_AT_NS, BUILT_AT_NS))
        (self.fingerprint / "lib-crate").write_text("built")
        source_times(first, "record", self.build_dir)

    def test_an_unchanged_file_gets_its_recorded_time_and_a_changed_one_keeps_the_clones(self):
        self.built_and_recorded()
        (self.origin / "src" / "main.rs").write_text("fn main() { changed() }\n")
        git(self.origin, "commit", "-qam", "second")
        second = self.clone("second")
        cloned_at = mtime(second / "src" / "main.rs")

        said = source_times(second, "restore", self.build_dir)

        self.assertEqual(mtime(second / "src" / "lib.rs"), BUILT_AT_NS, said)
        self.assertEqual(mtime(second / "src" / "main.rs"), cloned_at, said)
        self.assertIn("1 files given their recorded times; 1 changed", said)

    def test_a_file_edited_in_the_work_tree_is_judged_by_its_content_not_its_commit(self):
        self.built_and_recorded()
        second = self.clone("second")
        lib = second / "src" / "lib.rs"
        lib.write_text("pub fn edited() {}\n")
        edited_at = mtime(lib)

        source_times(second, "restore", self.build_dir)

        self.assertEqual(mtime(lib), edited_at)

    def assert_a_new_clone_keeps_its_times(self, because):
        second = self.clone("second")
        cloned_at = mtime(second / "src" / "lib.rs")

        said = source_times(second, "restore", self.build_dir)

        self.assertEqual(mtime(second / "src" / "lib.rs"), cloned_at, said)
        self.assertIn(because, said)

    def test_nothing_is_restored_when_something_built_after_the_record(self):
        self.built_and_recorded()
        time.sleep(0.01)
        (self.fingerprint / "lib-crate").write_text("built again, from another checkout")

        self.assert_a_new_clone_keeps_its_times("has built since its record")

    def test_a_build_directory_nested_in_the_cache_counts_as_a_build_after_the_record(self):
        self.built_and_recorded()
        time.sleep(0.01)
        nested = self.build_dir / "debug" / "k8s-openapi-1.33" / "debug" / ".fingerprint"
        (nested / "sdk-4567").mkdir(parents=True)

        self.assert_a_new_clone_keeps_its_times("has built since its record")

    def test_nothing_is_restored_without_a_record(self):
        self.assert_a_new_clone_keeps_its_times("no record")

    def test_a_restored_time_is_recorded_again_as_it_is(self):
        self.built_and_recorded()
        second = self.clone("second")
        source_times(second, "restore", self.build_dir)
        source_times(second, "record", self.build_dir)
        third = self.clone("third")

        source_times(third, "restore", self.build_dir)

        self.assertEqual(mtime(third / "src" / "lib.rs"), BUILT_AT_NS)


if __name__ == "__main__":
    unittest.main()
