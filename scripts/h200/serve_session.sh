#!/usr/bin/env bash
# Issue 13 on the H200: `metainfer serve` and `vllm serve` on the same full-size NVFP4 checkpoint,
# each benchmarked over HTTP by scripts/h200/serve_bench.py (same seeded prompts, same client).
#
#   bash scripts/h200/serve_session.sh metainfer   # checkpoint (unless there), render, serve + bench
#   bash scripts/h200/serve_session.sh vllm        # after harness/peers/vllm/install.sh (same machine)
#
# Results: $OUT/<metainfer|vllm>/serve_bench.json (rewritten after every level), server.log, and for
# metainfer bench.json (full_run.py's offline workloads, same engine; OFFLINE=0 skips); a printed table per level (TTFT/TPOT
# p50/p99, output tok/s). LEVELS (default 1,32,64) and RATES (Poisson req/s of the mixed set,
# default none) choose the levels; GRAPH_BATCH (64) the CUDA-graph batches; CKPT (/tmp/ckpt), GEN (/tmp/gen), PORT (8000) the places.
# The server and the client need fastapi, starlette, pydantic(-core), annotated-types, typing-inspection,
# uvicorn, openai, jiter, sniffio, httpx2, httpcore2 and truststore, none on the image: copy those wheels
# from the vLLM bundle's cache (~/.cache/metainfer/vllm-0.25.1/wheels, 5.7 MB) into .whl/ for the
# metainfer call (env.sh installs them); the vllm call has them from install.sh.
set -uo pipefail
source scripts/h200/env.sh
WHICH=${1:?usage: serve_session.sh metainfer|vllm}
CKPT=${CKPT:-/tmp/ckpt}; GEN=${GEN:-/tmp/gen}; PORT=${PORT:-8000}
LEVELS=${LEVELS:-1,32,64}; RATES=${RATES:-}
MODEL=qwen3.6-35b-a3b
[ -f "$CKPT/model.safetensors.index.json" ] || python3 scripts/h200/full_run.py --steps checkpoint --ckpt "$CKPT" --out "$OUT"
if [ "$WHICH" = metainfer ]; then
  python3 scripts/h200/full_run.py --steps render --gen "$GEN" --out "$OUT" --graph-batch "${GRAPH_BATCH:-64}"  # split-K 16
  LAUNCH="python3 -m metainfer.cli serve --model $MODEL --quant nvfp4 --gpu h200 --checkpoint $CKPT \
    --engine $GEN/$MODEL-nvfp4-h200 --add-tokenizer --port $PORT --max-batch 64 --max-seq-len 4608"
else
  [ -f "$CKPT/tokenizer.json" ] || python3 -c "from metainfer.checkpoint.tokenizer import write_tokenizer as w; \
from metainfer.targets import get_model; w(get_model('$MODEL'), '$CKPT')"
  export PYTHONPATH="/tmp/site:$PYTHONPATH" VLLM_USE_FLASHINFER_SAMPLER=0
  # the offline runs' settings (harness/peers/vllm/run_vllm.py) as serve flags
  LAUNCH="python3 -m vllm.entrypoints.cli.main serve $CKPT --served-model-name $MODEL --port $PORT \
    --max-model-len 4608 --max-num-seqs 64 --gpu-memory-utilization 0.8 --language-model-only --gdn-prefill-backend triton"
fi
python3 scripts/h200/serve_bench.py --url "http://127.0.0.1:$PORT/v1" --model "$MODEL" --concurrency "$LEVELS" \
  --rates "$RATES" --out "$OUT/$WHICH" --launch "$LAUNCH" --ready-timeout 420 --server-log "$OUT/$WHICH/server.log"
rc=$?
# the offline figures of the same engine in the same session (issue 13: HTTP keeps >= 90 % of offline conc32)
[ "$WHICH" = metainfer ] && [ "${OFFLINE:-1}" = 1 ] && python3 scripts/h200/full_run.py --steps bench --ckpt "$CKPT" --gen "$GEN" --out "$OUT/$WHICH"
exit $rc
