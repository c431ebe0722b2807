# B11 on a lent GPU (after build.sh): QwenLong-L1.5-30B-A3B's shapes, every layer offloaded, the
# full 32,768-token chunk. $1: the parts (default: all). $OUT/B11.json is the whole results file
# with the gpu part measured: copy it over benchmarks/results/B11.json here, then `python -m benchmarks doc`.
source .gpu/setup.sh || exit 1
set -o pipefail
args=(--gpu --work /tmp/b11 --vocab .gpu/qwen2.5-vocab-llamacpp.gguf)
python3 -m benchmarks run B11 "${args[@]}" --parts build --out /tmp/b11/build.json 2>&1 | tail -3 || exit 1
python3 -m benchmarks run B11 "${args[@]}" --parts "${1:-step,generation,widths,drafts}" \
    --out $OUT/B11.json 2>&1 | tee $OUT/b11-$(date +%H%M%S).log | grep -v '^ '
