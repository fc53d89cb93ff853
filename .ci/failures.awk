# failures.awk: the failing tests of one go test log, for .ci/run's
# summary. Run as `awk -f failures.awk LOG LOG` (two passes over the same
# file). The first pass collects the names on `--- FAIL:` lines; the
# second prints, in the order of the log:
#   - each `--- FAIL:` line and the indented message lines after it (what
#     go test prints without -v);
#   - with -v, the first lines a failing test logged with a file:line
#     prefix (its t.Error/t.Fatal messages), found under the `=== RUN`,
#     `=== CONT` or `=== NAME` header go test prints before them;
#   - panics, fatal errors, data races and `FAIL<TAB>package` lines with a
#     few lines of context.
FNR == NR {
  if (match($0, /--- FAIL: [^ ]+/)) failed[substr($0, RSTART + 10, RLENGTH - 10)] = 1
  next
}
/^=== (RUN|CONT|NAME|PAUSE) / { current = $3; messages = context = 0; next }
/^ *--- (PASS|SKIP):/ { current = ""; messages = context = 0; next }
/^ *--- FAIL:/ { print; current = ""; messages = 6; context = 0; next }
/^(panic: |fatal error: |WARNING: DATA RACE)/ { print; messages = 0; context = 14; next }
/^FAIL\t/ || /^# / { print; messages = context = 0; next }
context > 0 { print "    " $0; context--; next }
messages > 0 && /^[ \t]/ { print "    " $0; messages--; next }
{ messages = 0 }
current in failed && shown[current] < 5 && /^ +[^ ]+\.go:[0-9]+: / {
  print "    " current ": " substr($0, match($0, /[^ ]/))
  shown[current]++
}
