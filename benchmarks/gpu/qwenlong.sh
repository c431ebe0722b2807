# B11 on a lent GPU (after build.sh): QwenLong-L1.5-30B-A3B's shapes, every layer offloaded, the
# full 32,768-token chunk. $1: the parts (default: all). Results under $OUT; copy the JSON to
# benchmarks/qwenlong-gpu-results.json here, then `python benchmarks/run.py --doc-only`.
source .gpu/setup.sh || exit 1
set -o pipefail
args=(--gpu --work /tmp/b11 --vocab .gpu/qwen2.5-vocab-llamacpp.gguf)
python3 benchmarks/qwenlong.py "${args[@]}" --parts build 2>&1 | tail -3 || exit 1
python3 benchmarks/qwenlong.py "${args[@]}" --parts "${1:-step,generation,widths,drafts}" \
    --json $OUT/qwenlong-gpu-results.json 2>&1 | tee $OUT/b11-$(date +%H%M%S).log | grep -v '^ '
