# B17 (python -m benchmarks run B17) on a lent GPU, in the call that builds llama-cpp-python: the two
# 2-layer F16 models are written while it builds (numpy alone), then quantized and assembled into
# Qwen3-4B's and Qwen2.5-7B's layer counts (seconds on 16 cores), then the steps. $OUT/B17.json is the whole
# results file with the gpu part measured: copy it over benchmarks/results/B17.json here.
T0=$(date +%s); export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/b17
if [ ! -f /tmp/b17/f16.started ]; then
  touch /tmp/b17/f16.started
  PYTHONPATH=/tmp/site setsid nohup python3 -c "
from benchmarks.harness import shapes; from pathlib import Path
for shape in ('qwen3-4b', 'qwen2.5-7b'):
    f = Path('/tmp/b17') / f'random-{shape}-2L-f16.gguf'; p = f.with_name(f.name + '.partial')
    shapes.write_f16(shape, p, Path('tests/data/shared/fixtures/qwen2.5-vocab-llamacpp.gguf'), n_layer=2); p.rename(f)
" > /tmp/b17/f16.log 2>&1 < /dev/null &
fi
B4_F16=0 bash .gpu/build.sh || exit $?
source .gpu/setup.sh || exit 1
while pgrep -f "shapes.write_f16" > /dev/null; do sleep 1; done
cat /tmp/b17/f16.log; ls -la /tmp/b17
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/gpu.txt
python3 -m benchmarks run B17 --gpu --work /tmp/b17 --vocab tests/data/shared/fixtures/qwen2.5-vocab-llamacpp.gguf \
  --repeat ${REPEAT:-2} --out $OUT/B17.json 2>&1 | tee $OUT/b17.log
echo "total $(( $(date +%s) - T0 ))s"
