import json, math, sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from analyze import kept
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        for m, pairs in r["modes"].items():
            if not m.startswith("decode") or "batched" in m: continue
            srcs = r.get("sources", {}).get(m.split()[1]) or list(range(len(pairs)))
            per = {}
            for (e2, r2), s in zip(pairs, srcs):
                a, b = kept(e2, r2); x = per.setdefault(s, [0, 0]); x[0] += a; x[1] += b
            figs = sorted(((math.sqrt(v[0]/v[1]), s) for s, v in per.items()), reverse=True)
            print(f.split('/')[-1], r["nonce"], m, [(round(x, 4), s) for x, s in figs[:4]])
