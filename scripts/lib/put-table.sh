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

# bench_bin PROFILE BENCH DOC [ARGS...]: builds `tenantci` and the benchmark program BENCH
# (`bench_<name>`, crates/tenantci-bench/src/bin) with PROFILE (release or debug), runs it with
# the tenantci binary and ARGS, prints its table and puts it into DOC between the
# `bench-<name>` markers (BENCH with `-` for `_`). The shape of every benchmark that drives a
# `tenantci` it is given.
bench_bin() {
  local profile=$1 bench=$2 doc=$3
  shift 3
  local target="${CARGO_TARGET_DIR:-target}" flag=()
  [ "$profile" = release ] && flag=(--release)
  cargo build --locked --quiet "${flag[@]}" -p tenantci --bin tenantci -p tenantci-bench --bin "$bench"
  local table
  table=$("$target/$profile/$bench" "$target/$profile/tenantci" "$@")
  echo "$table"
  put_table "$doc" "${bench//_/-}" "$table"
}
