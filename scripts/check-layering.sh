#!/usr/bin/env bash
# The crate graph is the architecture (docs/architecture.md): fails when a crate's normal
# (non-dev) dependencies include what its layer must not use, or when a module of
# tenantci-dispatch or tenantci-sim imports one on its own or a higher floor, or their floor
# lists drift from layers.txt (scripts/lib/module_layers.py), or
# when the simulator names the product's certificate reader, quantities or DNS names
# (sim_reads_on_its_own, below), or when the default members are not every crate but the
# benchmarks (default_members_all_but_the_benchmarks). Manifests are the only way to add
# a dependency, so this catches a manifest change that breaks the layering, at review speed
# (`cargo tree` reads Cargo.lock; nothing is compiled).
#
# LAYERING_LOCK (default --locked) replaces the lock flag: the layering test breaks a rule in a
# scratch copy of the manifests, which changes the lock, and runs this with --offline.
# FORBIDDEN_PROVIDERS (default: aws-lc-rs aws-lc-sys openssl-sys) lists the crypto crates that
# may not be linked anywhere; the test sets it to a crate that is there, since a manifest that
# brings aws-lc-rs back cannot be resolved offline on a machine that never downloaded it.
set -euo pipefail
cd "$(dirname "$0")/.."
lock=${LAYERING_LOCK:---locked}

# present DEPS NAME...: prints each NAME that is a line of DEPS (crate names, one a line).
present() {
  local deps=$1
  shift
  for name in "$@"; do grep -qx "$name" <<<"$deps" && echo "$name"; done
  return 0
}

# names CARGO-TREE-FLAGS...: the crate names of a `cargo tree`, one a line.
names() { cargo tree "$lock" "$@" --prefix none | awk '{print $1}' | sort -u; }

# forbid PACKAGE [FLAGS...] -- NAME...: PACKAGE's normal dependency tree contains none of NAME.
forbid() {
  local pkg=$1 flags=() found deps
  shift
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  # A failing `cargo tree` (a lock that does not resolve) must fail the check, not pass it
  # with an empty list.
  deps=$(names -p "$pkg" "${flags[@]}" -e normal) || {
    echo "layering: cargo tree -p $pkg failed, so its dependencies cannot be judged" >&2
    return 1
  }
  found=$(present "$deps" "$@")
  for name in $found; do
    echo "layering: $pkg depends on $name (docs/architecture.md says it may not)" >&2
  done
  [ -z "$found" ]
}

# forbid_anywhere NAME...: nothing the workspace builds (tests and build scripts included) uses
# NAME. For the crypto provider: ring is the only one (docs/architecture.md); a second one
# costs every cold build its C compile (aws-lc-sys: ~90 s and cmake) and makes rustls refuse to
# pick a default.
forbid_anywhere() {
  local found
  local deps
  deps=$(names --workspace -e normal,build,dev) || {
    echo "layering: cargo tree --workspace failed, so the crypto providers cannot be judged" >&2
    return 1
  }
  found=$(present "$deps" "$@")
  for name in $found; do
    echo "layering: the workspace links $name, a second crypto provider (ring is the one; docs/architecture.md)" >&2
  done
  [ -z "$found" ]
}

# default_members_all_but_the_benchmarks: scripts/test.sh builds and tests the workspace's
# default members (Cargo.toml lists them), so a crate missing from that list would never be
# built or tested; and tenantci-bench, the benchmark programs, stays out of it (the test build
# does not compile them; scripts/bench*.sh do). Nothing can depend on tenantci-bench: it has
# no library.
default_members_all_but_the_benchmarks() {
  cargo metadata "$lock" --no-deps --format-version 1 | python3 -c '
import json, sys
m = json.load(sys.stdin)
name = {p["id"]: p["name"] for p in m["packages"]}
default = set(m["workspace_default_members"])
bad = False
for i in sorted(m["workspace_members"], key=lambda i: name[i]):
    if name[i] == "tenantci-bench" and i in default:
        print("layering: tenantci-bench is a default member: scripts/test.sh would compile every benchmark (Cargo.toml)", file=sys.stderr)
        bad = True
    elif name[i] != "tenantci-bench" and i not in default:
        print(f"layering: {name[i]} is not in default-members (Cargo.toml): scripts/test.sh would neither build nor test it", file=sys.stderr)
        bad = True
sys.exit(1 if bad else 0)
'
}

# sim_reads_on_its_own SRC_DIR: no .rs file of the simulator names core's certificate reader,
# quantities or DNS names (a `use` of them, grouped or nested, an alias of tenantci_core or of
# its pki module, a glob or re-export that would bring them in, or a path in the code; comments
# and string literals aside; tests too). A double that judges with the product's own code
# hides the product's bug: core's certificate reader dropped BMPString Organizations and took
# the first CN, and the simulator, reading subjects with it, agreed (issue 51).
sim_reads_on_its_own() {
  python3 - "$1" <<'PY'
import os, re, sys

sys.path.insert(0, "scripts/lib")
from rust_source import code_only  # noqa: E402

src = sys.argv[1]
FORBIDDEN = [("tenantci_core", "pki", "inspect"), ("tenantci_core", "pki", "kube_subject"), ("tenantci_core", "quantity"), ("tenantci_core", "dns")]
ANCESTORS = {f[:n] for f in FORBIDDEN for n in range(1, len(f))}
USE = re.compile(r"(?<![\w:])(pub\s*(?:\([^)]*\)\s*)?)?use\s+([^;]*);")
PATH = re.compile(r"(?<![\w:])(?:::\s*)?[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)+")


def use_tree(toks, i, path, out):
    """Appends (path, name bound or '*') for the use tree at toks[i]; returns the next index."""
    path = list(path)
    while i < len(toks):
        t = toks[i]
        if t == "{":
            i += 1
            while i < len(toks) and toks[i] != "}":
                i = use_tree(toks, i, path, out)
                i += toks[i:i + 1] == [","]
            return i + 1
        if t == "*":
            out.append((tuple(path), "*"))
            return i + 1
        if t != "::" and t != "self":
            path.append(t)
        i += 1
        if toks[i:i + 1] == ["::"] or t == "::":
            continue
        name = toks[i + 1] if toks[i:i + 1] == ["as"] else (path[-1] if path else "")
        out.append((tuple(path), name))
        return i + 2 if toks[i:i + 1] == ["as"] else i
    return i


def resolve(path, aliases):
    return aliases.get(path[0], path[:1]) + path[1:] if path else path


def forbidden(path):
    return next(("::".join(f) for f in FORBIDDEN if path[:len(f)] == f), None)


def check(rel, text):
    code = code_only(text)
    uses = []
    for m in USE.finditer(code):
        toks = re.findall(r"::|[{}*,]|[A-Za-z_]\w*", m.group(2))
        entries = []
        use_tree(toks, 0, (), entries)
        line = code.count("\n", 0, m.start()) + 1
        uses.append((line, bool(m.group(1)), " ".join(m.group(0).split()), entries))
    aliases = {"tenantci_core": ("tenantci_core",)}
    for m in re.finditer(r"extern\s+crate\s+tenantci_core\s+as\s+(\w+)", code):
        aliases[m.group(1)] = ("tenantci_core",)
    for _ in range(3):  # an alias of an alias
        for _, _, _, entries in uses:
            for path, name in entries:
                if name != "*" and resolve(path, aliases) in ANCESTORS:
                    aliases[name] = resolve(path, aliases)
    found = []
    for line, public, stmt, entries in uses:
        for path, name in entries:
            full = resolve(path, aliases)
            bad = forbidden(full)
            if not bad and full in ANCESTORS and (name == "*" or public):
                held = [f for f in FORBIDDEN if f[:len(full)] == full]
                how = "a glob" if name == "*" else "a re-export"
                bad = f"{', '.join('::'.join(f) for f in held)} ({how})"
            if bad:
                found.append((line, bad, stmt))
    for m in USE.finditer(code):
        code = code[:m.start()] + re.sub(r"[^\n]", " ", m.group(0)) + code[m.end():]
    for m in PATH.finditer(code):
        path = tuple(s for s in re.split(r"\s*::\s*", m.group(0).strip()) if s)
        bad = forbidden(resolve(path, aliases))
        if bad:
            found.append((code.count("\n", 0, m.start()) + 1, bad, " ".join(m.group(0).split())))
    return [(rel, line, bad, what) for line, bad, what in sorted(set(found))]


errors = []
for root, _, names in sorted(os.walk(src)):
    for name in sorted(names):
        if name.endswith(".rs"):
            rel = os.path.join(root, name)
            with open(rel, encoding="utf-8") as f:
                errors += check(rel, f.read())
for rel, line, bad, what in errors:
    print(f"layering: {rel}:{line}: `{what}` reaches {bad}, which the simulator may not use: it "
          "reads certificate subjects, quantities and DNS names by its own code, as Kubernetes "
          "does (docs/architecture.md)", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
}

status=0
# shellcheck disable=SC2086 # a list of names
forbid_anywhere ${FORBIDDEN_PROVIDERS:-aws-lc-rs aws-lc-sys openssl-sys} || status=1
forbid tenantci-core -- clap async-nats tenantci-runner tenantci-front tenantci-dispatch tenantci-sim tenantci-testkit || status=1
# The GitLab side, credentials and tenant RBAC: no queue, no dispatcher.
forbid tenantci-runner -- clap async-nats tenantci-front tenantci-dispatch tenantci-sim tenantci-testkit || status=1
# The front (a GitLab Runner on another host): its own trust boundary, over core alone.
forbid tenantci-front -- clap tenantci-runner tenantci-dispatch tenantci-sim tenantci-testkit || status=1
forbid tenantci-dispatch -- clap tenantci-front tenantci-sim tenantci-testkit || status=1
forbid tenantci-sim -- clap tenantci-runner tenantci-front tenantci-dispatch tenantci-testkit || status=1
forbid tenantci --no-default-features -- tenantci-sim tenantci-testkit || status=1
forbid tenantci -- tenantci-testkit || status=1
default_members_all_but_the_benchmarks || status=1
# Inside tenantci-dispatch and tenantci-sim, modules have floors too (crates/*/layers.txt): every
# import points down, no files import each other in a circle, and the crate doc's floor list
# and docs/architecture.md's drawing name the same modules on the same floors.
python3 scripts/lib/module_layers.py crates/tenantci-dispatch/src crates/tenantci-dispatch/layers.txt \
  --drawn-in docs/architecture.md || status=1
# The simulator's one known circle: gitea/mod.rs's GiteaDouble holds forgejo.rs's and web.rs's
# state, and their routes take the double back (to break: the double in a file below them).
python3 scripts/lib/module_layers.py crates/tenantci-sim/src crates/tenantci-sim/layers.txt \
  --drawn-in docs/architecture.md --circle-inside gitea || status=1
# Nothing outside the dispatcher's backend/ names a backend: a new one is its folder and a line
# in backend::catalog.
python3 scripts/lib/backend_named.py crates/tenantci-dispatch/src pod vm fake || status=1
# The fake backend is the tests': the binary's own dependency tree never turns it on.
if cargo tree "$lock" -p tenantci -e normal,features --prefix none | grep -q 'fake-backend'; then
  echo "layering: the tenantci binary's own dependencies turn on tenantci-dispatch's fake-backend feature (only tenantci-testkit, a test dependency, may)" >&2
  status=1
fi
# The simulator judges the product, so it reads what it judges by its own code.
sim_reads_on_its_own crates/tenantci-sim/src || status=1
[ $status = 0 ] && echo "layering: ok" >&2
exit $status
