"""Critical path of a cold `cargo build --timings`: reads the UNIT_DATA table of the HTML
report and walks back from the unit that finished last, through whichever unit unlocked each
step last. Prints the total, the tenantci crates' share of the path, and the path's last units.
Usage: critical_path.py cargo-timing.html"""
import json
import re
import sys

html = open(sys.argv[1]).read()
units = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);\n", html, re.S).group(1))
by_index = {u["i"]: u for u in units}
unlocked_by = {}
for u in units:
    for k in [k for key in ("unblocked_units", "unblocked_rmeta_units", "unlocked_units", "unlocked_rmeta_units") for k in u.get(key) or []]:
        unlocked_by.setdefault(k, []).append(u["i"])


def end(u):
    return u["start"] + u["duration"]


last = max(units, key=end)
chain = [last]
while unlocked_by.get(chain[-1]["i"]):
    chain.append(max((by_index[i] for i in unlocked_by[chain[-1]["i"]]), key=end))
ours = sum(u["duration"] for u in chain if u["name"].startswith("tenantci"))
tail = " <- ".join(f'{u["name"]} {u["duration"]:.0f}s' for u in chain[:4])
print(f"timings_total {end(last):.0f}")
print(f"critical_path_ours {ours:.0f}")
print(f"critical_path_tail {tail}")
