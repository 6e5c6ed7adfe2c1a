#!/usr/bin/env python3
"""Module layering inside one crate (docs/architecture.md, "tenantci-dispatch" and
"tenantci-sim").

Reads every import of the crate's sources: `use` trees, expanded (one line or several, nested
groups, a child module named bare), and `crate::`/`super::`/`self::` paths anywhere in the
code; comments, string literals and `#[cfg(test)]` modules are left out. Maps both ends to
files, and fails, naming the file, the line and the import, when:

- a file imports a module on a higher floor than its own (the floors are listed in LAYERS,
  lowest first; a module not listed is an error, so a new module takes a floor on purpose);
- files import each other in a circle (any length), inside a module or across modules (a
  circle whose files all lie inside a module named by --circle-inside is let pass: known debt,
  named where the check is called).

With --drawn-in DOC it also checks that the floors are written down the same in three places,
so they cannot drift (`floor docs`, below), and fails with one line per difference, naming the
module, the file and the fix.

Usage: module_layers.py SRC_DIR LAYERS_FILE [--drawn-in DOC] [--circle-inside MODULE]...
LAYERS_FILE: one floor a line, lowest first, top-level module names separated by spaces;
'#' starts a comment. Floors count from 1 everywhere (the first line is floor 1), as the lists do.

Floor docs. Floor line N of LAYERS_FILE (counted from 1, comments and blank lines aside) is:

- item `N.` of the numbered list in SRC_DIR/lib.rs's crate doc (`//!` lines): an item starts
  with `N. ` at the start of the comment's text, goes on over lines indented by at least one
  space, and names each module of its floor, and no other, as a bare intra-doc link
  [`module`] (a path such as [`backend::pod`] or plain `module` in code quotes is text);
  the first item numbered 1 starts the list, the first line that is neither an item nor
  indented ends it;
- `subgraph FN` of the crate's block in DOC: the lines between `<!-- floors: CRATE -->` and
  `<!-- /floors -->` (CRATE: the name of the directory holding LAYERS_FILE), a mermaid
  flowchart in which every floor is a `subgraph FN[...]` ... `end` and every module a node
  `module["..."]` inside the subgraph of its floor (edges, the `-->` lines, are free).

A crate whose lib.rs declares no module (the stub sources of the layering test's scratch
copies) has nothing to draw, and is not compared.
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


def read_floors(layers_file):
    """LAYERS_FILE's floors, lowest first: a list of lists of module names."""
    floors = []
    with open(layers_file, encoding="utf-8") as f:
        for line in f:
            names = line.split("#", 1)[0].split()
            if names:
                floors.append(names)
    return floors


DOC_ITEM = re.compile(r"(\d+)\.\s")
DOC_LINK = re.compile(r"\[`([A-Za-z_][A-Za-z0-9_]*)`\]")
DECLARED = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*;", re.M)
SUBGRAPH = re.compile(r"^\s*subgraph\s+([A-Za-z_]\w*)")
NODE = re.compile(r"^\s*([A-Za-z_]\w*)\s*[\[({]")


def lib_floor_list(lib_text):
    """The crate doc's numbered floor list: {item number: [(module, line)]}, or None."""
    items, current = {}, None
    for no, line in enumerate(lib_text.split("\n"), 1):
        m = re.match(r"\s*//!(.*)", line)
        if not m:
            continue
        text = m.group(1)[1:] if m.group(1).startswith(" ") else m.group(1)
        start = DOC_ITEM.match(text)
        if start and (int(start.group(1)) == 1 or current is not None):
            current = int(start.group(1))
            items[current] = []
        elif current is None or not text[:1].isspace():
            if current is not None:
                break
            continue
        items[current] += [(name, no) for name in DOC_LINK.findall(text)]
    return items or None


def drawn_floors(doc_text, crate):
    """The crate's floors block in DOC: ({floor number: [(module, line)]}, [(node, line)] drawn
    on no floor), or None when the block is missing."""
    lines = doc_text.split("\n")
    try:
        begin = lines.index(f"<!-- floors: {crate} -->")
        end = lines.index("<!-- /floors -->", begin)
    except ValueError:
        return None
    floors, loose, current = {}, [], None
    for no in range(begin + 1, end):
        line = lines[no].split("%%", 1)[0]
        sub = SUBGRAPH.match(line)
        if sub:
            number = re.fullmatch(r"F(\d+)", sub.group(1))
            current = int(number.group(1)) if number else -1
            floors.setdefault(current, [])
        elif line.strip() == "end":
            current = None
        elif "-->" not in line and NODE.match(line):
            name = NODE.match(line).group(1)
            if current is None:
                loose.append((name, no + 1))
            else:
                floors[current].append((name, no + 1))
    return floors, loose


def check_floor_docs(src, layers_file, floors, doc):
    """Floor line N of LAYERS_FILE against item N of lib.rs's floor list and `subgraph FN` of
    DOC's block for the crate: one error per module out of place, missing or extra."""
    lib = os.path.join(src, "lib.rs")
    lib_text = open(lib, encoding="utf-8").read() if os.path.isfile(lib) else ""
    if not DECLARED.search(code_only(lib_text)):
        return []
    crate = os.path.basename(os.path.dirname(os.path.abspath(layers_file)))
    where = {name: n for n, names in enumerate(floors, 1) for name in names}
    errors = []

    def compare(listed, file, place, how, seen=()):
        """`listed`: {number: [(module, line)]} as `file` writes the floors; `place(n)` names
        number n there, `how(m, n)` says how to write module m there; `seen`: modules already
        reported there."""
        seen = set(seen)
        for n, names in sorted(listed.items()):
            for name, no in names:
                seen.add(name)
                if name not in where:
                    errors.append(f"{file}:{no}: {place(n)} names `{name}`, which {layers_file} "
                                  f"does not list; remove it there (or give `{name}` a floor)")
                elif where[name] != n:
                    errors.append(f"{file}:{no}: `{name}` is in {place(n)}, but {layers_file} "
                                  f"has it on floor line {where[name]}; move it to "
                                  f"{place(where[name])}")
        for name, n in where.items():
            if name not in seen:
                errors.append(f"{file}: `{name}` (floor line {n} of {layers_file}) is missing "
                              f"from {place(n)}; add {how(name, n)} there")

    listed = lib_floor_list(lib_text)
    if listed is None:
        errors.append(f"{lib}: the crate doc has no numbered floor list; write {layers_file}'s "
                      "floors as `1. ...`, `2. ...` items naming each module as [`module`]")
    else:
        compare(listed, lib, lambda n: f"item {n}. of the crate doc's floor list",
                lambda name, n: f"[`{name}`]")
    doc_text = open(doc, encoding="utf-8").read() if os.path.isfile(doc) else None
    drawn = drawn_floors(doc_text, crate) if doc_text is not None else None
    if drawn is None:
        errors.append(f"{doc}: no `<!-- floors: {crate} -->` ... `<!-- /floors -->` block; add "
                      f"one that draws {layers_file}'s floors (a mermaid `subgraph FN` a floor)")
    else:
        by_floor, loose = drawn
        for name, no in loose:
            fix = (f"move it into `subgraph F{where[name]}` (floor line {where[name]} of "
                   f"{layers_file})" if name in where else
                   f"remove it (or give `{name}` a floor in {layers_file})")
            errors.append(f"{doc}:{no}: `{name}` is drawn outside every `subgraph FN` of the "
                          f"{crate} floors block; {fix}")
        compare(by_floor, doc, lambda n: f"`subgraph F{n}` of the {crate} floors block",
                lambda name, n: f'`{name}["{name}: ..."]`', [name for name, _ in loose])
    return errors


def main():
    args, positional, drawn_in, circle_ok = sys.argv[1:], [], None, set()
    while args:
        arg = args.pop(0)
        if arg == "--drawn-in":
            drawn_in = args.pop(0)
        elif arg == "--circle-inside":
            circle_ok.add(args.pop(0))
        else:
            positional.append(arg)
    src, layers_file = positional
    try:
        floors = read_floors(layers_file)
    except OSError as e:
        print(f"layering: {layers_file}: cannot read the floors ({e.strerror}); write one "
              "floor a line, lowest first", file=sys.stderr)
        return 1
    floor = {name: n for n, names in enumerate(floors) for name in names}
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
                    f"{rel}:{no}: `{mod[0]}` (floor {floor[mod[0]] + 1}) imports `{tmod[0]}` "
                    f"(floor {floor[tmod[0]] + 1}), a higher floor: `{text}`")
            elif floor[tmod[0]] == floor[mod[0]]:
                errors.append(
                    f"{rel}:{no}: `{mod[0]}` imports `{tmod[0]}` on its own floor "
                    f"({floor[mod[0]] + 1}): `{text}`; move what both need down a floor")
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
        inside = {(module_of_file(rel) or [""])[0] for rel in comp}
        if len(inside) == 1 and inside <= circle_ok:
            continue
        ties = []
        for a in comp:
            for b, (no, text) in sorted(edges.get(a, {}).items()):
                if b in members:
                    ties.append(f"    {a}:{no} -> {b}: `{text}`")
        errors.append("files import each other in a circle:\n" + "\n".join(ties))
    if drawn_in:
        errors += check_floor_docs(src, layers_file, floors, drawn_in)
    for e in errors:
        print(f"layering: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
