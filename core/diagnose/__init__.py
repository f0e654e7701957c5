"""Why a start is stuck or crashed: log lines, phases, finding rules, fixes, the stall watcher, host checks, triage."""
