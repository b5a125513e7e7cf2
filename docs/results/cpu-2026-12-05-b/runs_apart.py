"""Per-sequence figures with and without the 10% drop: equal-length batch and pieces, one engine, several seeds."""
import sys, random, importlib, torch
sys.path.insert(0, "/work/main")
from harness.parity_metrics import pooled_rows_error, rel_l2
eng_dir, ckpt, which = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, eng_dir)
engine = importlib.import_module("engine"); torch.set_num_threads(1)
e = engine.load(ckpt, "cpu", max_batch=16, max_seq_len=1024)
def tf(group, n):
    r = e.prefill([p for p, _ in group]); s = list(r.slots); rows = [[lg.float()[-1:]] for lg in r.logits]
    for j in range(n - 1):
        out = e.decode(s, [c[j] for _, c in group])
        for k in range(len(group)): rows[k].append(out[k:k+1].float())
    e.release(s); return [torch.cat(x) for x in rows]
def d(t, a): return pooled_rows_error([t], [a], drop=0.1)
for seed in range(int(sys.argv[4]), int(sys.argv[5])):
    rng = random.Random(seed); V = int(sys.argv[6]) if len(sys.argv) > 6 else 1000
    if which == "eq":
        L = rng.randint(4, 40); n = 16
        seqs = [([rng.randrange(V) for _ in range(L)], [rng.randrange(V) for _ in range(n)]) for _ in range(8)]
        tog = tf(seqs, n + 1); alone = [tf([s], n + 1)[0] for s in seqs]
        print(seed, "eq L", L, " ".join("%.4f" % rel_l2(t, a) for t, a in zip(tog, alone)), flush=True)
    else:
        res = []
        for p, pieces in ((rng.randint(300, 960), 2), (rng.randint(130, 300), 3)):
            prompt = [rng.randrange(V) for _ in range(p)]; cont = [rng.randrange(V) for _ in range(16)]
            want = tf([(prompt, cont)], 17)[0]
            places = list(range(64, p, 64)); cuts = sorted(rng.sample(places, pieces - 1)); b = [0, *cuts, p]; s = None
            for a_, c_ in zip(b, b[1:]):
                r = e.prefill([prompt[a_:c_]], s); s = list(r.slots)
            rows = [r.logits[0][-1:].float()]
            for t in cont: rows.append(e.decode(s, [t]).float())
            e.release(s); got = torch.cat(rows)
            res.append((rel_l2(got, want), d(got, want)))
        print(seed, "pieces untrimmed %s drop %s" % (["%.4f" % x for x, _ in res], ["%.4f" % y for _, y in res]), flush=True)
