#!/usr/bin/env bash
# Stage timer and budget guard for .ci/run (README: Development, "CI stages and budgets").
#
#   tools/ci_time_report.sh STAGE COMMAND...   runs COMMAND as stage STAGE, prints its
#                                              elapsed seconds beside the stage's budget and
#                                              fails when COMMAND fails or the budget is
#                                              exceeded (the next stages do not run then).
#   tools/ci_time_report.sh --report           prints every stage timed so far and the total,
#                                              and fails when the total exceeds its budget.
#
# The budgets are the table in README.md between the lines "<!-- ci-budgets -->" and
# "<!-- /ci-budgets -->": rows "| stage | budget in seconds | what it runs |", and the row
# "total". A stage with no row is an error, so a new stage gets a budget at review.
# Stage times are appended to $CI_TIMES (default: .ci-times in the repository; .ci/run
# removes it before its first stage).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
times=${CI_TIMES:-$root/.ci-times}

budget_of() {
  awk -v stage="$1" '
    /<!-- ci-budgets -->/ { on = 1; next }
    /<!-- \/ci-budgets -->/ { on = 0 }
    on && /^\|/ {
      n = split($0, f, "|")
      name = f[2]; gsub(/[ `]/, "", name)
      b = f[3]; gsub(/[ ,]/, "", b)
      if (name == stage && b ~ /^[0-9]+$/) { print b; found = 1; exit }
    }
    END { if (!found) exit 1 }' "$root/README.md"
}

if [ "${1:-}" = --report ]; then
  [ -f "$times" ] || { echo "ci_time_report: no stage was timed ($times is missing)" >&2; exit 1; }
  total_budget=$(budget_of total) || { echo "ci_time_report: README.md has no budget row for 'total'" >&2; exit 1; }
  echo "== CI stage times (seconds; budgets from README.md, Development)"
  printf '%-16s %8s %8s\n' stage elapsed budget
  total=0
  while read -r stage elapsed budget; do
    printf '%-16s %8d %8d\n' "$stage" "$elapsed" "$budget"
    total=$((total + elapsed))
  done < "$times"
  printf '%-16s %8d %8d\n' total "$total" "$total_budget"
  if ((total > total_budget)); then
    echo "ci_time_report: the stages took ${total} s, over the total budget of ${total_budget} s" >&2
    exit 1
  fi
  exit 0
fi

if (($# < 2)); then
  echo "usage: $0 STAGE COMMAND... | $0 --report" >&2
  exit 2
fi
stage=$1
shift
budget=$(budget_of "$stage") || {
  echo "ci_time_report: README.md has no budget row for stage '$stage' (add one to the table in Development)" >&2
  exit 1
}
echo "== stage $stage (budget ${budget} s): $*"
start=$(date +%s)
rc=0
"$@" || rc=$?
elapsed=$(($(date +%s) - start))
echo "$stage $elapsed $budget" >> "$times"
echo "== stage $stage: ${elapsed} s (budget ${budget} s)$( ((rc)) && echo ", failed with exit code $rc")"
if ((rc)); then exit "$rc"; fi
if ((elapsed > budget)); then
  echo "ci_time_report: stage '$stage' took ${elapsed} s, over its budget of ${budget} s (README.md, Development)" >&2
  exit 1
fi
