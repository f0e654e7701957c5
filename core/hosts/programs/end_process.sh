# gpuops' careful end of a process, sent to a host as `sh -c SOURCE gpuops-end PID WANT GRACE`:
# PID's command line must still start with WANT (what gpuops showed, up to its first secret; empty:
# not checked), then SIGTERM and up to GRACE seconds for it to go. Prints one word (and exits):
# gone (0: it had already exited), changed COMMAND (3: another program has that pid now),
# refused (4: no permission), alive (5: still running after the grace), ended (0). POSIX sh.
pid=$1; want=$2; grace=$3
[ -d "/proc/$pid" ] || { echo gone; exit 0; }
if [ -n "$want" ]; then
    have=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | sed 's/ $//')
    case "$have" in "$want"*) ;; *) echo "changed $have"; exit 3 ;; esac
fi
kill -TERM "$pid" 2>/dev/null || { echo "refused"; exit 4; }
i=0
while [ -d "/proc/$pid" ] && [ "$i" -lt "$((grace * 10))" ]; do sleep 0.1; i=$((i + 1)); done
if [ -d "/proc/$pid" ]; then
    state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null)
    [ "$state" = "Z" ] && { echo ended; exit 0; }
    echo alive; exit 5
fi
echo ended
