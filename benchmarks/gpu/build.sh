# Device call 1 (again if it ran out of time: it picks up where it was): in the background, write the
# F16 model (unless B4_F16=0) and build llama-cpp-python with CUDA; wait; install it.
export PYTHONUNBUFFERED=1 REPO=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
if [ ! -f /tmp/build.started ]; then
  touch /tmp/build.started
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvcc --version | tail -2; nproc
  mkdir -p /tmp/b4
  [ "${B4_F16:-1}" = 0 ] || setsid nohup python3 -c "
from benchmarks.harness import shapes; from pathlib import Path
p = Path('/tmp/b4'); f = p / 'random-qwen2.5-7b-f16.gguf.partial'
shapes.write_f16('qwen2.5-7b', f, Path('.gpu/qwen2.5-vocab-llamacpp.gguf')); f.rename(p / 'random-qwen2.5-7b-f16.gguf')
" > /tmp/b4/f16.log 2>&1 < /dev/null &
  (cd /tmp && tar xJf $REPO/.src/llama_cpp_python-0.3.36-trim.tar.xz) || exit 1
  setsid nohup bash -c 't0=$(date +%s); cd /tmp/llama_cpp_python-0.3.36 && CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip wheel -v --no-deps --no-build-isolation -w /tmp/wheel . > /tmp/build.log 2>&1; echo $? $(( $(date +%s) - t0 )) > /tmp/build.done' < /dev/null > /dev/null 2>&1 &
fi
for i in $(seq 1 265); do [ -f /tmp/build.done ] && break; sleep 2; done
if [ ! -f /tmp/build.done ]; then echo "STILL BUILDING"; tail -3 /tmp/build.log; ls -la /tmp/b4; exit 3; fi
echo "build rc and seconds: $(cat /tmp/build.done)"; ls -la /tmp/wheel || { tail -60 /tmp/build.log; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site /tmp/wheel/llama_cpp_python-*.whl || exit 1
python3 -c "import llama_cpp; print('offload', llama_cpp.llama_supports_gpu_offload())"
cat /tmp/b4/f16.log; ls -la /tmp/b4
