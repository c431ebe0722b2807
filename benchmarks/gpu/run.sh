# Device calls 2+: the benchmark parts named in $1 (default: all). $OUT/B4.json is the whole results
# file with the gpu part measured: copy it over benchmarks/results/B4.json here, then `python -m benchmarks doc`.
source .gpu/setup.sh || exit 1
while pgrep -f "shapes.write_f16" >/dev/null; do sleep 2; done
cat /tmp/b4/f16.log 2>/dev/null
set -o pipefail
python3 -m benchmarks run B4 --device gpu --work /tmp/b4 --vocab .gpu/qwen2.5-vocab-llamacpp.gguf --parts "${1:-bare,memagent,engine,e2e,batch,verify,doctor}" --repeat "${2:-2}" --out $OUT/B4.json 2>&1 | tee $OUT/b4-$(date +%H%M%S).log | grep -v '^ '
