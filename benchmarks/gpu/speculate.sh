# B6's copying and real parts with every layer on the GPU: the `speculate` piece of B4's gpu part. SmolLM2's GGUF (98 MB) is larger than what
# one call carries (64 MiB), so it travels in two halves: `split -b 49M` it into .sm/, carry part-aa
# alone with `cp .sm/part-aa /tmp/`, then part-ab with this script; the real prose needs the two
# PDFs of speculate.real() copied into .sm/ too.
source .gpu/setup.sh || exit 1
mkdir -p ~/.cache/memagent-bench && cat /tmp/part-aa .sm/part-ab > ~/.cache/memagent-bench/SmolLM2-135M-Instruct.Q4_1.gguf
python3 -m benchmarks run B4 --device gpu --parts speculate --repeat 2 --out $OUT/B4.json
