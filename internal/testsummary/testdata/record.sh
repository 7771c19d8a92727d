#!/usr/bin/env bash
# Re-records the go test -json inputs the tests read, from the tiny packages
# in src/ (a module of its own under testdata, so go build ./... skips it).
# cutoff.jsonl is pass.jsonl without its last three events: a stream that
# stopped before its package ended.
set -u
cd "$(dirname "$0")/src"
for p in pass fail skip buildfail panicky pkgskip notests parentfail; do
  go test -json -count=1 "./$p" > "../$p.jsonl" 2>/dev/null
done
go test -json -count=1 -timeout 1s ./timeout > ../timeout.jsonl 2>/dev/null
head -n -3 ../pass.jsonl > ../cutoff.jsonl
