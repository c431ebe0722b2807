# A device call after build.sh and run.sh (the 7B-shaped model in /tmp/b4), on the same warm machine:
# where memagent's CUDA process crashes. A native backtrace of `ask` under gdb or cuda-gdb (whichever
# the image has), then the variants of crash.py, then `ask` under settings that may change it.
source .gpu/setup.sh || exit 1
M=/tmp/b4/random-qwen2.5-7b-q4_k_m.gguf
[ -f "$M" ] || { echo "no model in /tmp/b4: run .gpu/run.sh first"; exit 1; }
export MEMAGENT_HOME=/tmp/b4/home
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 40) > /tmp/b4/crash.txt
ASK="python3 -X faulthandler -m memagent_cli ask /tmp/b4/crash.txt Who? -m $M --no-trace --temperature 0 --memory-tokens 8 --answer-tokens 4 --quiet --gpu-layers -1"
echo "stack limit: $(ulimit -s)"
GDB=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
echo "debugger: ${GDB:-none}"
if [ -n "$GDB" ]; then
  timeout 240 "$GDB" -q -batch -ex "set pagination off" -ex run -ex "bt 60" -ex "info threads" --args $ASK > $OUT/gdb.log 2>&1
  grep -q SIGSEGV $OUT/gdb.log && grep -A70 SIGSEGV $OUT/gdb.log | head -90 || tail -20 $OUT/gdb.log
fi
for v in engine encode_then_llama encode_then_engine encode_in_thread_while_engine; do
  echo "== $v"; timeout 120 python3 -m benchmarks.gpu.crash $v $M > $OUT/crash-$v.log 2>&1; echo "rc=$?"
  grep -E "^OK|Fatal|File \"/tmp/site/(memagent|llama)|File \"benchmarks" $OUT/crash-$v.log | head -8
done
for setting in "" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 CUDA_MODULE_LOADING=EAGER; do
  echo "== ask ${setting:-as is}"; env $setting timeout 120 $ASK > $OUT/ask.log 2>&1; echo "rc=$?"
  grep -E "Fatal|File \"/tmp/site/(memagent|llama)" $OUT/ask.log | head -6
done
