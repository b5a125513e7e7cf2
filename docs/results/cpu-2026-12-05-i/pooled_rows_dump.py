import sys, torch, math
import harness.consistency as C
orig = C.pooled_by_source
def wrapped(err2, ref2, sources, **kw):
    fig = orig(err2, ref2, sources, **kw)
    if len(err2) > 6 and fig.value > 0.012:
        print("POOL", kw, "value", fig.value, "rows", fig.rows, "sources", fig.sources, "dropped", fig.dropped)
        for e, r, s in zip(err2, ref2, sources):
            rel = (e / r.clamp(min=1e-30)).sqrt()
            print("  src", s, "n", e.numel(), "row rel", [round(float(x), 4) for x in rel], "seq", round(float((e.sum()/r.sum()).sqrt()),4))
    return fig
C.pooled_by_source = wrapped
from harness.gate import main
sys.exit(main(sys.argv[1:]))
