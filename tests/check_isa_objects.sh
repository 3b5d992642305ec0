#!/usr/bin/env bash
# The *_avx2.cpp / *_avx512.cpp objects are compiled with wider -m flags than the rest of
# the program. A weak (inline or template) function they define out of line can be the
# copy the linker keeps for every caller, so a scalar or AVX2 path would run AVX-512
# instructions and die with SIGILL on a CPU without them (the failure is invisible on a
# machine that has them). This fails if such an object defines a weak function outside
# its own ISA namespace (gannet::kernels::avx2:: / avx512::, or gannet::bench::<isa>::).
#
# usage: check_isa_objects.sh OBJECT...   (all of a library's objects; others are skipped)
set -euo pipefail
NM=${NM:-nm}
bad=0 checked=0
for obj in "$@"; do
  case "$obj" in
    *_avx512.cpp.o) isa=avx512 ;;
    *_avx2.cpp.o) isa=avx2 ;;
    *) continue ;;
  esac
  checked=$((checked + 1))
  # W: a weak symbol that is not a data object, i.e. code. Objects in an ISA namespace
  # are only defined by files of that ISA, so any copy the linker keeps is right.
  while IFS= read -r sym; do
    case "$sym" in
      "gannet::kernels::$isa::"* | "gannet::bench::$isa::"*) ;;
      *) echo "$obj: weak function compiled for $isa outside its namespace: $sym"; bad=$((bad + 1)) ;;
    esac
  done < <("$NM" -C --defined-only "$obj" | awk '$2 == "W" { $1 = ""; $2 = ""; sub(/^  /, ""); print }')
done
if [ "$checked" -eq 0 ]; then
  echo "no *_avx2 / *_avx512 objects among the $# given: the check would prove nothing"
  exit 1
fi
echo "$checked ISA objects checked, $bad weak functions outside their ISA namespace"
[ "$bad" -eq 0 ]
