#!/usr/bin/env python3
"""Module layering inside one crate (docs/architecture.md, "tenantci-dispatch").

Reads every `crate::` and `super::` path in the crate's sources (tests excluded: a file's
`#[cfg(test)] mod` and everything after it), maps both ends to files, and fails, naming the
file, the line and the import, when:

- a file imports a module on a higher floor than its own (the floors are listed in LAYERS,
  lowest first; a module not listed is an error, so a new module takes a floor on purpose);
- files import each other in a circle (any length), inside a module or across modules.

Usage: module_layers.py SRC_DIR LAYERS_FILE
LAYERS_FILE: one floor a line, lowest first, top-level module names separated by spaces;
'#' starts a comment.
"""
import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{")


def strip_comments(line):
    i = line.find("//")
    return line if i < 0 else line[:i]


def module_of_file(rel):
    """'backend/pod/mod.rs' -> ['backend', 'pod']; 'lib.rs' (or a binary's main.rs) -> []."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def file_of_module(src, segments):
    """The longest prefix of `segments` that is a file, as (relative file, module path)."""
    for n in range(len(segments), -1, -1):
        prefix = segments[:n]
        if not prefix:
            return "lib.rs", []
        base = "/".join(prefix)
        for cand in (base + ".rs", base + "/mod.rs"):
            if os.path.isfile(os.path.join(src, cand)):
                return cand, prefix
    return "lib.rs", []


def resolve(mod, kind, rest):
    segs = [s for s in rest.split("::") if s]
    if kind == "crate":
        return segs
    if kind == "self":
        return mod + segs
    base = list(mod)
    while segs and segs[0] == "super":
        segs = segs[1:]
        base = base[:-1]
    return base[:-1] + segs


def imports(src, rel):
    mod = module_of_file(rel)
    out = []
    with open(os.path.join(src, rel), encoding="utf-8") as f:
        lines = f.read().split("\n")
    group = None  # (kind, prefix) inside `use x::{ ... }` spanning lines
    for no, raw in enumerate(lines, 1):
        if raw.strip().startswith("#[cfg(test)]") and no < len(lines) and \
                re.match(r"\s*(pub(\(\w+\))?\s+)?mod\s", lines[no]):
            break
        line = strip_comments(raw)
        found = []
        for m in PATH.finditer(line):
            found.append((m.group(1), m.group(2)))
        g = USE_GROUP.search(line)
        if g and "}" not in line[g.end():]:
            group = (g.group(1), g.group(2))
        elif group is not None:
            # names inside a multi-line group: `foo::Bar,` or `baz,`
            for m in re.finditer(r"\b([a-z_][a-z0-9_]*)(?:::|\s*[,}]|\s*$)", line):
                found.append((group[0], group[1] + "::" + m.group(1)))
            if "}" in line:
                group = None
        for kind, rest in found:
            target = resolve(mod, kind, rest)
            tfile, tmod = file_of_module(src, target)
            if tfile != rel:
                out.append((no, raw.strip(), tfile, tmod))
    return out


def main():
    src, layers_file = sys.argv[1], sys.argv[2]
    floor = {}
    with open(layers_file, encoding="utf-8") as f:
        n = 0
        for line in f:
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            for name in line:
                floor[name] = n
            n += 1
    files = []
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                files.append(os.path.relpath(os.path.join(root, name), src))
    files.sort()
    errors = []
    edges = {}
    for rel in files:
        mod = module_of_file(rel)
        if mod and mod[0] not in floor:
            errors.append(f"{rel}: module `{mod[0]}` has no floor in {layers_file}; give it one")
            continue
        for no, text, tfile, tmod in imports(src, rel):
            edges.setdefault(rel, {}).setdefault(tfile, (no, text))
            if not mod or not tmod or tmod[0] == mod[0]:
                continue
            if tmod[0] not in floor:
                continue
            if floor[tmod[0]] > floor[mod[0]]:
                errors.append(
                    f"{rel}:{no}: `{mod[0]}` (floor {floor[mod[0]]}) imports `{tmod[0]}` "
                    f"(floor {floor[tmod[0]]}), a higher floor: `{text}`")
            elif floor[tmod[0]] == floor[mod[0]]:
                errors.append(
                    f"{rel}:{no}: `{mod[0]}` imports `{tmod[0]}` on its own floor "
                    f"({floor[mod[0]]}): `{text}`; move what both need down a floor")
    # Cycles between files (Tarjan's strongly connected components).
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in files:
        if v not in index:
            visit(v)
    for comp in sccs:
        members = set(comp)
        ties = []
        for a in comp:
            for b, (no, text) in sorted(edges.get(a, {}).items()):
                if b in members:
                    ties.append(f"    {a}:{no} -> {b}: `{text}`")
        errors.append("files import each other in a circle:\n" + "\n".join(ties))
    for e in errors:
        print(f"layering: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
