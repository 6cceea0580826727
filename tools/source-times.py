#!/usr/bin/env python3
"""Gives a fresh clone's files the modification times they had when a build directory last built
them, where their contents are still the same, so that Cargo does not compile again what the
clone has not changed.

    tools/source-times.py record DIR    after the builds: DIR's record of each tracked file's
                                        content digest and modification time
    tools/source-times.py restore DIR   before the builds: each tracked file whose content is
                                        what DIR's record says gets the recorded time; nothing
                                        when DIR has no record, or when something has built in
                                        DIR since the record was written

Run both in the work tree's root. Cargo decides that a workspace crate is fresh when none of its
sources (the files its last compilation read) is newer than that compilation; every file of a
clone is as new as the clone, so every workspace crate compiles again in every clone although a
build directory kept across clones holds it already. A time is restored only to a file whose
content is byte for byte what it was when the record was written, and only when no compilation
has written to DIR since: then every output in DIR newer than a restored time was built from the
content the file has now (the record is written after the run's last build), and a file that
changed keeps the clone's time and compiles as before.

What this cannot see: another checkout built into DIR *while* the run that records is under way
(its outputs would be older than the record and newer than the times restored from it). DIR must
be one run's alone while that run lasts; `.ci/run` holds a lock on it for its whole run.
"""

import hashlib
import os
import pathlib
import subprocess
import sys

RECORD = "source-times"


def tracked_files():
    """The work tree's tracked regular files (symbolic links left alone), by relative path."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], check=True, capture_output=True
    ).stdout.split(b"\0")
    files = []
    for name in listed:
        if not name:
            continue
        path = pathlib.Path(os.fsdecode(name))
        if path.is_file() and not path.is_symlink():
            files.append(path)
    return files


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_record(record):
    """digest and time by path, from a record `record` wrote."""
    times = {}
    for line in record.read_text(encoding="utf-8").splitlines():
        sha, mtime_ns, name = line.split("\t", 2)
        times[name] = (sha, int(mtime_ns))
    return times


# What Cargo writes beside `.fingerprint` in a profile's directory: large, and never a build
# directory of its own.
NOT_BUILD_DIRECTORIES = {"deps", "build", "incremental", "examples"}


def newest_build(build_dir):
    """The newest modification time (ns) of anything in a `.fingerprint` directory under
    build_dir, in every profile and in build directories nested in it (`make library-versions`
    has one): Cargo writes a unit's fingerprint whenever it compiles that unit."""
    newest = 0
    for root, dirs, _ in os.walk(build_dir):
        if os.path.basename(root) == ".fingerprint":
            for unit_root, unit_dirs, unit_files in os.walk(root):
                for name in unit_dirs + unit_files:
                    newest = max(newest, os.stat(os.path.join(unit_root, name)).st_mtime_ns)
            dirs.clear()
            continue
        dirs[:] = [d for d in dirs if d not in NOT_BUILD_DIRECTORIES]
    return newest


def record(build_dir):
    lines = []
    for path in tracked_files():
        lines.append(f"{digest(path)}\t{path.stat().st_mtime_ns}\t{path}\n")
    partial = build_dir / f".{RECORD}.partial"
    partial.write_text("".join(lines), encoding="utf-8")
    partial.replace(build_dir / RECORD)
    print(f"source-times: recorded {len(lines)} files in {build_dir / RECORD}", file=sys.stderr)


def restore(build_dir):
    record_path = build_dir / RECORD
    if not record_path.is_file():
        print(
            f"source-times: no record in {build_dir}: every workspace crate compiles",
            file=sys.stderr,
        )
        return
    recorded_at = record_path.stat().st_mtime_ns
    if newest_build(build_dir) > recorded_at:
        print(
            f"source-times: {build_dir} has built since its record: no time restored, every "
            "workspace crate compiles",
            file=sys.stderr,
        )
        return
    times = read_record(record_path)
    restored = changed = 0
    for path in tracked_files():
        was = times.get(str(path))
        if was is None or was[0] != digest(path):
            changed += 1
            continue
        os.utime(path, ns=(path.stat().st_atime_ns, was[1]))
        restored += 1
    print(
        f"source-times: {restored} files given their recorded times; {changed} changed or new "
        "keep the clone's",
        file=sys.stderr,
    )


def main(argv):
    if len(argv) != 3 or argv[1] not in ("record", "restore"):
        sys.exit(f"usage: {argv[0]} record|restore DIR")
    build_dir = pathlib.Path(argv[2])
    if not build_dir.is_dir():
        sys.exit(f"{argv[0]}: {build_dir} is not a directory")
    {"record": record, "restore": restore}[argv[1]](build_dir)


if __name__ == "__main__":
    main(sys.argv)
