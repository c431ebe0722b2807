# Sourced at the start of every device call: wheels, a CUDA llama-cpp-python, memagent.
export PYTHONUNBUFFERED=1 REPO=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
if ! python3 -c "import llama_cpp,sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)" 2>/dev/null; then
  if ls .cuda/llama_cuda.part-* >/dev/null 2>&1; then
    cat .cuda/llama_cuda.part-* > /tmp/llama_cpp_python-0.3.36-cp312-cp312-linux_x86_64.whl
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site /tmp/llama_cpp_python-0.3.36-cp312-cp312-linux_x86_64.whl || exit 1
  else
    echo "no CUDA llama-cpp-python: build it first (.gpu/build.sh)"; exit 1
  fi
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-cache-dir --upgrade --target /tmp/site . >/dev/null || exit 1
python3 -c "import llama_cpp; print('offload', llama_cpp.llama_supports_gpu_offload())"
