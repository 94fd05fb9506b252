#!/usr/bin/env bash
# fashion_mnist must reject a missing, corrupt or truncated dataset with a
# clear error naming the file — exit status 1, never a crash — and reject bad
# command lines with status 2. Builds small IDX files by hand (format:
# big-endian magic 0x0803/0x0801, big-endian dimensions, unsigned bytes).
set -u
program=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/fashion_bad_data.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
images() {  # count rows cols [pixel-bytes]
  { be32 $((0x803)); be32 "$1"; be32 "$2"; be32 "$3"; head -c "${4:-$(($1 * $2 * $3))}" /dev/zero; }
}
labels() {  # count [label value]
  { be32 $((0x801)); be32 "$1"; for ((i = 0; i < $1; i++)); do printf "\\x$(printf %02x "${2:-3}")"; done; }
}
# A valid dataset of 8 training and 4 test images.
valid() {
  mkdir -p "$1"
  images 8 28 28 | gzip > "$1/train-images-idx3-ubyte.gz"
  labels 8 | gzip > "$1/train-labels-idx1-ubyte.gz"
  images 4 28 28 | gzip > "$1/t10k-images-idx3-ubyte.gz"
  labels 4 | gzip > "$1/t10k-labels-idx1-ubyte.gz"
}

# expect <name> <status> <regex> -- args...
expect() {
  local name=$1 status=$2 pattern=$3
  shift 4
  local out rc
  out=$("$program" --progress 0 "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -ne $status ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL $name: status $rc (want $status), stderr: $out"
    failures=$((failures + 1))
  else
    echo "ok   $name: $(head -n 1 <<<"$out")"
  fi
}

expect missing_directory 1 "cannot open .*/nonexistent/train-images-idx3-ubyte.gz" -- --data-dir "$work/nonexistent"

valid "$work/truncated_gzip"
head -c 40 "$work/truncated_gzip/train-images-idx3-ubyte.gz" > "$work/t" && mv "$work/t" "$work/truncated_gzip/train-images-idx3-ubyte.gz"
expect truncated_gzip 1 "train-images-idx3-ubyte.gz: (truncated|corrupt gzip)" -- --data-dir "$work/truncated_gzip"

valid "$work/truncated_pixels"
images 8 28 28 1000 | gzip > "$work/truncated_pixels/train-images-idx3-ubyte.gz"
expect truncated_pixels 1 "train-images-idx3-ubyte.gz: truncated while reading the pixels" -- --data-dir "$work/truncated_pixels"

valid "$work/corrupt_gzip"
{ head -c 20 "$work/corrupt_gzip/t10k-images-idx3-ubyte.gz"; head -c 3000 /dev/urandom; } > "$work/t"
mv "$work/t" "$work/corrupt_gzip/t10k-images-idx3-ubyte.gz"
expect corrupt_gzip 1 "t10k-images-idx3-ubyte.gz: (corrupt gzip|truncated|not an IDX|implausible)" -- --data-dir "$work/corrupt_gzip"

valid "$work/wrong_magic"
labels 8 | gzip > "$work/wrong_magic/train-images-idx3-ubyte.gz"
expect wrong_magic 1 "train-images-idx3-ubyte.gz: not an IDX image file" -- --data-dir "$work/wrong_magic"

valid "$work/absurd_size"
{ be32 $((0x803)); be32 4000000000; be32 28; be32 28; } | gzip > "$work/absurd_size/train-images-idx3-ubyte.gz"
expect absurd_size 1 "implausible dimensions" -- --data-dir "$work/absurd_size"

valid "$work/count_mismatch"
labels 5 | gzip > "$work/count_mismatch/t10k-labels-idx1-ubyte.gz"
expect count_mismatch 1 "4 images but 5 labels" -- --data-dir "$work/count_mismatch"

valid "$work/bad_label"
labels 8 10 | gzip > "$work/bad_label/train-labels-idx1-ubyte.gz"
expect bad_label 1 "label 10 at index 0 is not below 10" -- --data-dir "$work/bad_label"

valid "$work/trailing"
{ labels 4; printf 'x'; } | gzip > "$work/trailing/t10k-labels-idx1-ubyte.gz"
expect trailing_bytes 1 "trailing bytes" -- --data-dir "$work/trailing"

# The valid tiny dataset trains end to end (and proves the cases above fail
# for the reason they name, not for another).
valid "$work/ok"
out=$("$program" --progress 0 --data-dir "$work/ok" --steps 4 --H 2 --batch 2 --learners 2 --transport sim 2>&1)
if [[ $? -ne 0 ]] || ! grep -q '"test_accuracy"' <<<"$out"; then
  echo "FAIL valid_tiny_dataset: $out"; failures=$((failures + 1))
else
  echo "ok   valid_tiny_dataset"
fi

expect unknown_option 2 "unknown option '--nope'" -- --nope 1
expect bad_number 2 "bad value 'many' for --learners" -- --learners many
expect bad_speeds 2 "--speeds needs one value per learner" -- --learners 4 --speeds 1,1
expect bad_mode 2 "unknown mode 'async'" -- --mode async
expect bad_overlap 2 "--overlap must be smaller than --H" -- --H 4 --overlap 4

exit $((failures > 0))
