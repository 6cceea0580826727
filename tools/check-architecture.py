#!/usr/bin/env python3
"""Checks that the crate table of docs/architecture.md says what `cargo metadata` says: every
workspace crate is listed once, in its directory, with exactly its workspace dependencies
(normal and dev); that the SDK's top-level modules import one another without a circle
(the serving module depends on what it serves, never the other way round); and that the files
the map says to read top-down for a behaviour never call back into one before them. Exits 1
naming every difference, circle and call back, so the map cannot drift from the code."""

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
SDK = ROOT / "sdk" / "src"
OPERATOR = ROOT / "operator" / "src"
BEGIN, END = "<!-- crate-dependencies: begin -->", "<!-- crate-dependencies: end -->"


def names(cell):
    return frozenset(n.strip() for n in cell.split(",") if n.strip())


def documented(text):
    """The table between the markers: crate -> (directory, normal deps, dev deps)."""
    if BEGIN not in text or END not in text:
        sys.exit(f"{DOC}: the markers {BEGIN} / {END} are missing")
    rows = {}
    for line in text.split(BEGIN, 1)[1].split(END, 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("crate", "") or set(cells[0]) <= {"-"}:
            continue
        crate, directory, normal, dev = cells
        if crate in rows:
            sys.exit(f"{DOC}: {crate} is listed twice")
        rows[crate] = (directory.strip("`").rstrip("/"), names(normal), names(dev))
    return rows


def actual():
    """The same, from cargo metadata (dependencies on crates outside the workspace left out)."""
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    packages = json.loads(out)["packages"]
    workspace = {p["name"] for p in packages}
    rows = {}
    for p in packages:
        deps = [d for d in p["dependencies"] if d["name"] in workspace]
        directory = pathlib.Path(p["manifest_path"]).parent.relative_to(ROOT).as_posix()
        rows[p["name"]] = (
            directory,
            frozenset(d["name"] for d in deps if d["kind"] is None),
            frozenset(d["name"] for d in deps if d["kind"] == "dev"),
        )
    return rows


def differences(doc, cargo):
    found = []
    for crate in sorted(cargo.keys() - doc.keys()):
        found.append(f"{crate} is a workspace crate but not in the table")
    for crate in sorted(doc.keys() - cargo.keys()):
        found.append(f"{crate} is in the table but not a workspace crate")
    for crate in sorted(doc.keys() & cargo.keys()):
        for what, said, real in zip(("directory", "depends on", "dev-dependencies"), doc[crate], cargo[crate]):
            if said != real:
                show = (lambda v: v) if what == "directory" else (lambda v: ", ".join(sorted(v)) or "nothing")
                found.append(f"{crate}: {what} says {show(said)}, cargo says {show(real)}")
    return found


def module_imports(src):
    """The SDK's top-level modules and the others each imports (`crate::x`), tests and comments
    (doc links) left out."""
    imports = {}
    for path in src.rglob("*.rs"):
        top = path.relative_to(src).parts[0].removesuffix(".rs")
        if top in ("lib", "main") or path.name == "tests.rs":
            continue
        text = path.read_text().split("#[cfg(test)]\nmod tests", 1)[0]
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
        used = set(re.findall(r"crate::([a-z_]+)", code)) - {top}
        imports.setdefault(top, set()).update(used)
    return {m: {d for d in deps if d in imports} for m, deps in imports.items()}


def circles(imports):
    """Every group of modules that import one another in a circle (strongly connected, more
    than one), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for dep in sorted(imports[module]):
            if dep not in index:
                visit(dep)
                low[module] = min(low[module], low[dep])
            elif dep in on_stack:
                low[module] = min(low[module], index[dep])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return sorted(found)


def top_down_paths(text):
    """Each map row that says "read top-down:", as its files in order: every `path.rs` followed
    by its parenthesised role (files named inside a role are helpers, not steps), under
    operator/src."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or "read top-down:" not in line:
            continue
        steps = re.findall(r"`([\w/.]+\.rs)` \(", line.split("read top-down:", 1)[1])
        rows.append([ROOT / step if step.startswith("operator/") else OPERATOR / step for step in steps])
    return rows


def calls_back(paths):
    """Every call in a later file of `paths` to a function defined in an earlier one, as
    "later calls earlier::name"; tests and comments left out."""
    def code(path):
        text = path.read_text().split("#[cfg(test)]", 1)[0]
        return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))

    found = []
    for i, earlier in enumerate(paths):
        defined = set(re.findall(r"\bfn (\w+)", code(earlier)))
        for later in paths[i + 1:]:
            called = set(re.findall(r"\b(?:self|sup|supervisor)\.(\w+)\(", code(later)))
            called |= set(re.findall(rf"\b{earlier.stem}::(\w+)\(", code(later)))
            for name in sorted(defined & called):
                found.append(f"{later.relative_to(ROOT)} calls back {earlier.relative_to(ROOT)}'s {name}")
    return found


def main():
    for group in circles(module_imports(SDK)):
        print(f"sdk/src: these modules import one another in a circle: {', '.join(group)}", file=sys.stderr)
        sys.exit(1)
    text = DOC.read_text()
    rows = top_down_paths(text)
    if not rows or any(len(paths) < 2 for paths in rows):
        print("docs/architecture.md: no files to read top-down found in the map", file=sys.stderr)
        sys.exit(1)
    for paths in rows:
        for line in calls_back(paths):
            print(f"docs/architecture.md says to read top-down, but {line}", file=sys.stderr)
            sys.exit(1)
    found = differences(documented(text), actual())
    for line in found:
        print(f"docs/architecture.md: {line}", file=sys.stderr)
    if found:
        sys.exit(1)
    print("docs/architecture.md agrees with cargo metadata and the code")


if __name__ == "__main__":
    main()
