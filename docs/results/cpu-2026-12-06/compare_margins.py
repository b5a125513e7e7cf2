import re, sys, collections
def parse(path):
    out = {}; quant = "nvfp4"; seen = set()
    for line in open(path):
        m = re.match(r"(\d+) (\S+)\s+(\w+) (\{.*?\})", line)
        if not m: continue
        n, name, verdict, figs = int(m[1]), m[2], m[3], eval(m[4])
        key = (n, name)
        q = "bf16" if key in seen else "nvfp4"
        seen.add(key)
        out[(q, n, name)] = (verdict, {k: tuple(map(float, v.split("/"))) for k, v in figs.items()})
    return out
a, b = parse(sys.argv[1]), parse(sys.argv[2])
agg = collections.defaultdict(list)
for k in sorted(a):
    if k not in b: continue
    (va, fa), (vb, fb) = a[k], b[k]
    row = " ".join(f"{f}: {fa[f][0]/fa[f][1]:.2f}->{fb[f][0]/fb[f][1]:.2f}" for f in ("prefill wide", "decode wide"))
    print(k[0], k[1], f"{k[2]:26s}", va, "->", vb, row)
    for f in ("prefill wide", "decode wide"):
        agg[(k[0], k[2], f)].append((fa[f][0]/fa[f][1], fb[f][0]/fb[f][1]))
print()
for (q, name, f), xs in sorted(agg.items()):
    print(f"{q:5s} {name:26s} {f:12s} main {min(x for x,_ in xs):.2f}-{max(x for x,_ in xs):.2f}  branch {min(y for _,y in xs):.2f}-{max(y for _,y in xs):.2f}  (n={len(xs)})")
