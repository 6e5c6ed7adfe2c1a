# put_table DOC NAME TABLE: replaces what stands between `<!-- NAME:begin -->` and
# `<!-- NAME:end -->` in DOC with TABLE (a benchmark's output); a DOC without the markers is
# left alone. Sourced by the bench scripts.
put_table() {
  local doc=$1 name=$2 table=$3
  [ -f "$doc" ] && grep -q "<!-- $name:begin -->" "$doc" || return 0
  python3 - "$doc" "$name" "$table" <<'PY'
import sys
path, name, table = sys.argv[1:4]
s = open(path).read()
a = s.index(f"<!-- {name}:begin -->") + len(f"<!-- {name}:begin -->")
b = s.index(f"<!-- {name}:end -->")
open(path, "w").write(s[:a] + "\n" + table + "\n" + s[b:])
PY
}
