#!/usr/bin/env python3
"""Module layering inside one crate (docs/architecture.md, "tenantci-dispatch").

Reads every import of the crate's sources: `use` trees, expanded (one line or several, nested
groups, a child module named bare), and `crate::`/`super::`/`self::` paths anywhere in the
code; comments, string literals and `#[cfg(test)]` modules are left out. Maps both ends to
files, and fails, naming the file, the line and the import, when:

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
USE = re.compile(r"\buse\s+([^;]+);", re.S)
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(pub(\(\w+\))?\s+)?mod\s+\w+\s*\{")


def blank(text, start, end):
    """`text` with [start, end) replaced by spaces, newlines kept (line numbers stay true)."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def code_only(text):
    """The source with comments, string and char literals blanked, and every `#[cfg(test)]`
    module blanked whole (tests may import anything): what is left is what the crate builds."""
    out, i, n = list(text), 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and (i == 0 or not text[i - 1].isalnum()):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            j = text.find('"' + hashes, i + len(hashes) + 2)
            j = n if j < 0 else j + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            j = i + len(re.match(r"'(\\.|[^\\'])'", text[i:i + 4]).group(0))
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            if out[k] != "\n":
                out[k] = " "
        i = j
    code = "".join(out)
    for m in reversed(list(TEST_MOD.finditer(code))):
        depth, k = 0, m.end() - 1
        while k < len(code):
            depth += {"{": 1, "}": -1}.get(code[k], 0)
            if depth == 0:
                break
            k += 1
        code = blank(code, m.start(), k + 1)
    return code


def expand(tree):
    """`a::{b, c::{d, e as f}, self}` -> ['a::b', 'a::c::d', 'a::c::e', 'a']."""
    tree = re.sub(r"\s+", "", tree)
    if "{" not in tree:
        return [re.sub(r"as\w+$", "", tree.split(" as ")[0]).rstrip(":")]
    i = tree.index("{")
    head, body = tree[:i].rstrip(":"), tree[i + 1:tree.rindex("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    out = []
    for part in filter(None, parts):
        for sub in expand(part):
            sub = re.sub(r"as[A-Za-z_]\w*$", "", sub) if "as" in sub and not sub.endswith("as") else sub
            out.append(head if sub == "self" else (head + "::" + sub if head else sub))
    return out


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


def is_child(src, mod, name):
    base = "/".join(mod + [name])
    return any(os.path.isfile(os.path.join(src, c)) for c in (base + ".rs", base + "/mod.rs"))


def imports(src, rel):
    """Every (line, text, target file, target module) that `rel` imports from the crate: `use`
    trees (expanded, a child module named bare included) and `crate::`/`super::`/`self::` paths
    anywhere in the code."""
    mod = module_of_file(rel)
    with open(os.path.join(src, rel), encoding="utf-8") as f:
        text = f.read()
    code = code_only(text)
    lines = text.split("\n")
    found = []
    for m in USE.finditer(code):
        no = code.count("\n", 0, m.start()) + 1
        for path in expand(m.group(1)):
            first = path.split("::")[0]
            if first in ("crate", "super", "self"):
                found.append((no, first, path[len(first):]))
            elif is_child(src, mod, first):
                found.append((no, "self", "::" + path))
    for m in PATH.finditer(code):
        found.append((code.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    out = []
    for no, kind, rest in found:
        tfile, tmod = file_of_module(src, resolve(mod, kind, rest))
        # The root holds only `mod` lines (its re-exports are refused), so a path that ends
        # there (an inline module's `super::`, which this reading takes a floor too high) is
        # no edge.
        if tfile != rel and tmod:
            out.append((no, lines[no - 1].strip(), tfile, tmod))
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
        if not mod:
            # A root re-export would let `crate::Name` hide which module, and floor, it is.
            code = code_only(open(os.path.join(src, rel), encoding="utf-8").read())
            for m in re.finditer(r"\bpub\s+use\s+(?:crate::)?(\w+)", code):
                if m.group(1) in floor:
                    no = code.count("\n", 0, m.start()) + 1
                    errors.append(f"{rel}:{no}: the crate root re-exports from `{m.group(1)}`; "
                                  "import it from its module, so its floor shows")
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
