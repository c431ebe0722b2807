# One device call (a session with 15 minutes of device time): build llama-cpp-python with CUDA
# (build.sh, no 7B model), then memagent's GPU checks within $1 seconds of the call's start: the
# KV-cache refusal against GPU memory (gpu_kv.py, with KV=1), then the test files that run the
# engine (default --gpu-layers auto, so on the GPU) under pytest-xdist (4 workers: 14 shared the GPU so
# badly in session 14 that 9 tests ran past 100 s; 4 ran all 200 in 61 s), -v so that each test's name
# and result reach $OUT/pytest.log as it ends (a run cut off by the time limit still names its
# failures). Results under $OUT; the failures' names and the slowest tests at the end.
T0=$(date +%s); LIMIT=${1:-580}
B4_F16=0 bash .gpu/build.sh || exit $?
source .gpu/setup.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv | tee $OUT/gpu.txt
[ "${KV:-0}" = 1 ] && timeout 90 python3 -m benchmarks.gpu.gpu_kv /tmp/kv 2>&1 | tee $OUT/kv.jsonl
left=$(( LIMIT - ($(date +%s) - T0) - 10 ))
echo "pytest gets ${left}s"
timeout $left python3 -m pytest -n ${WORKERS:-4} -p no:cacheprovider -v -o addopts=-ra --timeout ${TEST_TIMEOUT:-100} -W ignore \
  --durations=25 --junitxml=$OUT/junit.xml \
  tests/test_gpu.py tests/test_runtime.py tests/test_trained.py tests/test_each.py tests/test_batched.py tests/test_reliability.py \
  tests/test_qwenlong.py tests/test_speculate.py tests/test_formats_trained.py tests/test_live.py tests/test_protocol.py \
  tests/test_infmem_loop.py tests/test_infmem_trained.py \
  > $OUT/pytest.log 2>&1
echo "rc=$? total $(( $(date +%s) - T0 ))s"
grep -E "FAILED|ERROR" $OUT/pytest.log | head -60
tail -50 $OUT/pytest.log
