# Device call 1, after build.sh in the same call (`bash .gpu/build.sh && bash .gpu/diag.sh`): starts
# quantizing the 7B-shaped model in the background for run.sh, and meanwhile checks that llama.cpp
# loads with every layer on the GPU whatever the process loaded before it (the libstdc++ SIGSEGV of
# 2026-11-23, PERFORMANCE.md B4), on the F16 model build.sh wrote.
source .gpu/setup.sh || exit 1
M=/tmp/b4/random-qwen2.5-7b-f16.gguf
while pgrep -f "shapes.write_f16" >/dev/null; do sleep 2; done
setsid nohup python3 -c "from benchmarks.harness import shapes; from pathlib import Path; shapes.build('qwen2.5-7b', Path('/tmp/b4'), Path('.gpu/qwen2.5-vocab-llamacpp.gguf'))" > /tmp/b4/quant.log 2>&1 < /dev/null &
L=/tmp/site/llama_cpp/lib
for f in libllama.so libggml-cuda.so; do echo "-- $f needs:"; readelf -d $L/$f | grep NEEDED | sed 's/.*\[/  /; s/\]//'; done
echo "std:: symbols libggml-cuda.so exports: $(nm -DC --defined-only $L/libggml-cuda.so | grep -c ' std::')"
run() { echo "== $1"; shift; timeout 120 env "$@" > /tmp/v.log 2>&1; echo "rc=$?"; grep -E "^OK|Fatal|Error" /tmp/v.log | head -3; }
LOAD="import llama_cpp; llama_cpp.Llama(model_path='$M', n_gpu_layers=-1, n_ctx=512, verbose=False); print('OK')"
run "llama_cpp alone" python3 -c "$LOAD"
run "numpy first (SIGSEGV before the fix)" python3 -c "import numpy; $LOAD"
run "numpy first, then memagent_cli.model (the fix)" python3 -c "import sys; sys.path.insert(0, '.'); import numpy, memagent_cli.model; $LOAD"
run "LlamaEngine after tokenizing" python3 -m benchmarks.gpu.crash encode_then_engine $M
run "LlamaEngine, ingest thread during the load" python3 -m benchmarks.gpu.crash encode_in_thread_while_engine $M
export MEMAGENT_HOME=/tmp/b4/home
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 40) > /tmp/b4/crash.txt
run "ask, every layer on the GPU" python3 -X faulthandler -m memagent_cli ask /tmp/b4/crash.txt Who? -m $M --no-trace --temperature 0 --memory-tokens 8 --answer-tokens 4 --quiet --gpu-layers -1
