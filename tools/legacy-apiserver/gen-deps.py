#!/usr/bin/env python3
"""Writes deps.txt: the module version for every repository kube-apiserver v1.13.0 imports.

Run once by hand (build.sh only reads deps.txt). Kubernetes 1.13 vendored its dependencies
with godep: Godeps/Godeps.json pins each imported package to a git revision, and the module
zip of k8s.io/kubernetes@v1.13.0 ships that file without vendor/. The Go module proxy serves
only canonical versions (a tag, or a pseudo-version with the commit's exact timestamp), not
bare revisions, so each pinned revision is mapped to a module version as follows:

  1. `pseudo`: a pseudo-version naming the same commit, found in the go.mod/go.sum of
     k8s.io/kubernetes@v1.15.0 (the first release with go.mod), or in PUBLIC_PSEUDO below
     (the same commit's pseudo-version as other projects' go.mod files spell it; the proxy
     checks the timestamp against the commit, so a wrong one is refused): the exact revision.
  2. `tag`: Godeps' `Comment` is `git describe` of the revision; when it is a bare tag, the
     revision is that tag: the exact revision.
  3. `bump`: otherwise the version Kubernetes 1.15.0 pinned for that module (a later commit).
  4. `copy`: bitbucket.org/ww/goautoneg (Bitbucket dropped Mercurial; the proxy refuses it)
     comes from the verbatim copy github.com/prometheus/common keeps of it (internal/), at the
     prometheus/common revision Godeps pins; Godeps lists that copy too.
  5. `override`: a version forced by OVERRIDES below, because the pinned one breaks on
     today's Go.

It finds which repositories are needed by asking `go list` (GOPATH mode, GO111MODULE=off, the
way 1.13 was built) for the missing imports of cmd/kube-apiserver and of openapi-gen, fetching
them, and asking again until nothing is missing.

  tools/legacy-apiserver/gen-deps.py GOPATH_TREE   # GOPATH_TREE as build.sh prepares it
"""
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# kube-apiserver, and openapi-gen: 1.13's build generated pkg/generated/openapi with it (the file
# is not in the source), from the same vendor tree.
PACKAGES = ["./cmd/kube-apiserver", "./vendor/k8s.io/kube-openapi/cmd/openapi-gen"]

# module path -> (version, why); kept minimal, each one a break on Go 1.26.
OVERRIDES = {
    # v1.0.1 reads runtime map internals whose layout changed in Go 1.18: on Go 1.26 the pinned
    # json-iterator marshalling a map with it dies in reflect.mapiternext (SIGSEGV); v1.0.2 is
    # the fix and keeps the same API.
    "github.com/modern-go/reflect2": ("v1.0.2", "v1.0.1 segfaults iterating maps on Go 1.26"),
}


# Godeps revision (12 hex digits) -> module version, for the revisions Kubernetes 1.15 no longer
# pinned; each one was downloaded once to check that the proxy serves it.
PUBLIC_PSEUDO = {
    "3b1ae45394a2": "v0.0.0-20160913182117-3b1ae45394a2",  # cloud.google.com/go
    "5bd2802263f2": "v0.0.0-20160726150825-5bd2802263f2",  # PuerkitoBio/urlesc
    "3ac7bf7a47d1": "v0.0.0-20160229213445-3ac7bf7a47d1",  # beorn7/perks
    "782f4967f2dc": "v0.0.0-20170626231645-782f4967f2dc",  # davecgh/go-spew
    "a9fbbdc8dd87": "v0.0.0-20180612054059-a9fbbdc8dd87",  # docker/docker
    "3dcc96556217": "v0.0.0-20150624150248-3dcc96556217",  # elazarl/go-bindata-assetfs
    "dcef7f557305": "v0.0.0-20170208215640-dcef7f557305",  # emicklei/go-restful-swagger12
    "36442dbdb585": "v0.0.0-20180908160633-36442dbdb585",  # evanphx/json-patch
    "44d81051d367": "v0.0.0-20161122191042-44d81051d367",  # google/gofuzz
    "8c31c18f31ed": "v0.0.0-20171113160352-8c31c18f31ed",  # google/uuid
    "781450b3c4fc": "v0.0.0-20180330165814-781450b3c4fc",  # gophercloud/gophercloud
    "a0d98a5f2880": "v0.0.0-20160207214719-a0d98a5f2880",  # hashicorp/golang-lru
    "0b12d6b521d8": "v0.0.0-20160202185014-0b12d6b521d8",  # jmespath/go-jmespath
    "2f5df55504eb": "v0.0.0-20170624190925-2f5df55504eb",  # mailru/easyjson
    "53818660ed49": "v0.0.0-20170307201123-53818660ed49",  # mitchellh/mapstructure
    "ca53cad383ca": "v0.0.0-20150603214016-ca53cad383ca",  # pborman/uuid
    "e7e903064f5e": "v0.0.0-20170531130054-e7e903064f5e",  # prometheus/client_golang
    "fa8ad6fec335": "v0.0.0-20150212101744-fa8ad6fec335",  # prometheus/client_model
    "13ba4ddd0caa": "v0.0.0-20170427095455-13ba4ddd0caa",  # prometheus/common
    "65c1f6f8f0fc": "v0.0.0-20170519190837-65c1f6f8f0fc",  # prometheus/procfs
    "bdcc60b419d1": "v0.0.0-20171019201919-bdcc60b419d1",  # ugorji/go
    "22f74650cf39": "v0.0.0-20180822160426-22f74650cf39",  # vmware/govmomi
    "de0752318171": "v0.0.0-20180808211826-de0752318171",  # golang.org/x/crypto
    "0ed95abb35c4": "v0.0.0-20180124060956-0ed95abb35c4",  # golang.org/x/net
    "a6bd8cefa181": "v0.0.0-20170412232759-a6bd8cefa181",  # golang.org/x/oauth2
    "95c657629925": "v0.0.0-20171031081856-95c657629925",  # golang.org/x/sys
    "b19bf474d317": "v0.0.0-20170810154203-b19bf474d317",  # golang.org/x/text
    "2382e3994d48": "v0.0.0-20170428054726-2382e3994d48",  # golang.org/x/tools
    "3639d6d93f37": "v0.0.0-20180621000839-3639d6d93f37",  # google.golang.org/api
    "8139d8cb77af": "v0.0.0-20181108234604-8139d8cb77af",  # k8s.io/klog
    "c59034cc13d5": "v0.0.0-20181109181836-c59034cc13d5",  # k8s.io/kube-openapi
    "66066c83e385": "v0.0.0-20180726175726-66066c83e385",  # k8s.io/utils
    "51747d6e00da": "v0.0.0-20181106084056-51747d6e00da",  # k8s.io/gengo
}

# repository -> (module, version, directory inside it): taken from a copy another module keeps.
COPIES = {
    "bitbucket.org/ww/goautoneg": ("github.com/prometheus/common",
                                   PUBLIC_PSEUDO["13ba4ddd0caa"],
                                   "internal/bitbucket.org/ww/goautoneg"),
}


def go(*args, env=None):
    return subprocess.run(["go", *args], capture_output=True, text=True, env=env)


def repo_root(path):
    parts = path.split("/")
    if parts[0] == "gopkg.in":
        for i in range(1, len(parts)):
            if re.search(r"\.v\d+$", parts[i]):
                return "/".join(parts[: i + 1])
    if parts[0] in ("github.com", "bitbucket.org", "golang.org", "gonum.org"):
        return "/".join(parts[:3])
    return "/".join(parts[:2])


def known_pseudo_versions():
    info = json.loads(go("mod", "download", "-json", "k8s.io/kubernetes@v1.15.0").stdout)
    by_rev, by_module = {}, {}
    text = open(info["GoMod"]).read()
    for module, version in re.findall(r"^\s+(\S+) (v\S+)", text, re.M):
        by_module.setdefault(module, version)
    text += open(os.path.join(info["Dir"], "go.sum")).read()
    for module, version in re.findall(r"^\s*(\S+) (v\S+?)(?:/go\.mod)? h1:", text, re.M):
        m = re.search(r"[0-9]{14}-([0-9a-f]{12})", version)
        if m:
            by_rev.setdefault(m.group(1), (module, version.replace("/go.mod", "")))
    return by_rev, by_module


def try_download(module, version):
    out = go("mod", "download", "-json", f"{module}@{version}")
    try:
        info = json.loads(out.stdout)
    except json.JSONDecodeError:
        return None
    return None if "Error" in info else info


def resolve(root, dep, by_rev, by_module):
    rev, comment = dep["Rev"], dep.get("Comment", "")
    if root in OVERRIDES:
        version, why = OVERRIDES[root]
        return root, version, "override", why
    hit = by_rev.get(rev[:12])
    if hit and hit[0] == root:
        return root, hit[1], "pseudo", ""
    if rev[:12] in PUBLIC_PSEUDO:
        return root, PUBLIC_PSEUDO[rev[:12]], "pseudo", ""
    if comment and re.fullmatch(r"v?\d+(\.\d+)*(-[0-9A-Za-z.]+)?", comment) and "-g" not in comment:
        for tag in dict.fromkeys([comment, "v" + comment.lstrip("v")]):
            for candidate in (tag, tag + "+incompatible"):
                if try_download(root, candidate):
                    return root, candidate, "tag", ""
    if root in by_module:
        return root, by_module[root], "bump", f"godeps {rev[:12]} ({comment or 'untagged'}) not served"
    return root, None, "missing", f"godeps {rev[:12]} ({comment or 'untagged'})"


def main():
    tree = os.path.abspath(sys.argv[1])
    gopath = tree[: tree.index("/src/k8s.io/kubernetes")]
    godeps = json.load(open(os.path.join(tree, "Godeps/Godeps.json")))["Deps"]
    by_rev, by_module = known_pseudo_versions()
    env = dict(os.environ, GO111MODULE="off", GOPATH=gopath, GOFLAGS="")
    done, lines = set(), []
    # Start from the source's own vendor/: only the links to staging/ (so a rerun lists everything).
    vendor = os.path.join(tree, "vendor")
    for entry in os.listdir(vendor):
        path = os.path.join(vendor, entry)
        if os.path.isdir(path) and entry != "k8s.io":
            shutil.rmtree(path)
    for entry in os.listdir(os.path.join(vendor, "k8s.io")):
        path = os.path.join(vendor, "k8s.io", entry)
        if not os.path.islink(path):
            shutil.rmtree(path)
    while True:
        out = subprocess.run(
            ["go", "list", "-e", "-deps", "-f", "{{if .Error}}{{.ImportPath}}{{end}}", *PACKAGES],
            cwd=tree, capture_output=True, text=True, env=env).stdout.split()
        # A package of ours with an error (a missing import of its own) is not a repository.
        missing = sorted({repo_root(p) for p in out
                          if "." in p.split("/")[0] and not p.startswith("k8s.io/kubernetes")} - done)
        if not missing:
            break
        for root in missing:
            done.add(root)
            deps = [d for d in godeps if repo_root(d["ImportPath"]) == root]
            if not deps:
                lines.append((root, "-", "-", "-", "missing", "-", "not in Godeps.json"))
                continue
            sub = ""
            if root in COPIES:
                module, version, sub = COPIES[root]
                how, note = "copy", "Godeps lists the copy too"
            else:
                module, version, how, note = resolve(root, deps[0], by_rev, by_module)
            lines.append((root, module, version or "-", sub or ".", how, deps[0]["Rev"][:12], note))
            info = version and try_download(module, version)
            if not info:
                print(f"unresolved: {root} {deps[0]['Rev']} {note}", file=sys.stderr)
                continue
            dest = os.path.join(tree, "vendor", root)
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(os.path.join(info["Dir"], sub), dest)
            subprocess.run(["chmod", "-R", "u+w", dest], check=True)
            print(f"{how:8} {root} {version}", file=sys.stderr)
    with open(os.path.join(HERE, "deps.txt"), "w") as f:
        f.write("# Written by gen-deps.py; build.sh reads the first four columns.\n"
                "# repository module version subdirectory how godeps-revision note\n")
        for line in sorted(lines):
            f.write(" ".join(line).rstrip() + "\n")


if __name__ == "__main__":
    main()
