import json, math, sys
def kept(e2, r2, drop=0.1):
    n = len(e2); k = min(n - 1, math.ceil(drop * n)) if drop else 0
    idx = sorted(range(n), key=lambda i: e2[i])[: n - k]
    return sum(e2[i] for i in idx), sum(r2[i] for i in idx)
def stats(pairs, srcs, dropP):
    per = {}
    for (e2, r2), s in zip(pairs, srcs):
        a, b = kept(e2, r2); x = per.setdefault(s, [0, 0]); x[0] += a; x[1] += b
    vals = sorted(per.values(), key=lambda v: v[0] / v[1])
    A = math.sqrt(sum(v[0] for v in vals) / sum(v[1] for v in vals))
    k = dropP(len(vals))
    keep = vals[: len(vals) - k]
    B = math.sqrt(sum(v[0] for v in keep) / sum(v[1] for v in keep))
    med = sorted(math.sqrt(v[0] / v[1]) for v in vals)[len(vals) // 2]
    return A, B, med, len(vals)
if __name__ != "__main__": pass
def _main():
    out = {}
    for f in sys.argv[1:]:
        for line in open(f):
            r = json.loads(line)
            for m, pairs in r["modes"].items():
                if not m.startswith("decode"): continue
                srcs = r.get("sources", {}).get(m.split()[1]) or list(range(len(pairs)))
                srcs = srcs[: len(pairs)] if len(srcs) >= len(pairs) else list(range(len(pairs)))
                A, B, med, P = stats(pairs, srcs, lambda p: p // 8)
                out.setdefault((f, m), []).append((r["nonce"], A, B, med, P))
    for (f, m), rows in out.items():
        print(f.split('/')[-1], m, "n", len(rows), "P", rows[0][4])
        for name, i in (("A pooled", 1), ("B dropworst", 2), ("C median", 3)):
            xs = [x[i] for x in rows]
            print(f"   {name:12s} min {min(xs):.4f} max {max(xs):.4f} mean {sum(xs)/len(xs):.4f}  ", " ".join(f"{x:.4f}" for x in xs))
if __name__ == "__main__":
    _main()
