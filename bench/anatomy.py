"""anatomy.py: one run's figures from the kernel's process events (bench/anatomy.sh).

    perf script -F comm,pid,tid,time,event,trace | python bench/anatomy.py SCRIPTS

Reads the sched_process_fork, _exec and _exit events `perf record` took around one
command, and prints one JSON line:

  first_fork_ms   the first script's fork, from the command's exec
  lifetimes_ms    the scripts' lifetimes summed (fork to the exit of their last thread)
  last_exit_ms    the last script's exit
  end_ms          the command's own exit
  turnaround_ms   each wait from a script's exit to the fork of the script that took its slot
  scripts         how many scripts it counted

A script is a process (it has an exit of its own, the last of its threads) whose
parent forked it and that lived longer than 50 ms and less than 60% of the command:
that leaves out threads, bwrap's probes, the sandbox's test child and the zygotes,
which live most of the run. SCRIPTS, how many scripts the command was given, is
checked against that count.
"""

import json
import re
import sys

EVENT = re.compile(r"\s*(.+?)\s+(\d+)/(\d+)\s+([\d.]+):\s+sched:sched_process_(\w+):\s*(.*)")


def events(lines):
    for line in lines:
        m = EVENT.match(line)
        if m:
            comm, pid, tid, t, kind, rest = m.groups()
            yield float(t) * 1000, int(pid), int(tid), kind, rest


def main():
    expected = int(sys.argv[1])
    start = end = None
    forks = {}  # child pid -> (parent pid, time)
    exits = {}  # pid -> time its last thread ended
    root = None
    for t, pid, tid, kind, rest in events(sys.stdin):
        if start is None:
            start = t
        if kind == "exec" and root is None:
            root = pid
        if kind == "fork" and pid == tid:
            child = int(re.search(r"child_pid=(\d+)", rest).group(1))
            forks[child] = (pid, t)
        elif kind == "exit" and "group_dead=true" in rest:
            exits[pid] = t
            if pid == root:
                end = t
    if start is None or end is None:
        sys.exit("anatomy.py: no exec or no exit of the command in the events")
    wall = end - start
    scripts = []
    for child, (parent, born) in forks.items():
        died = exits.get(child)
        if died is not None and 50 < died - born < 0.6 * wall:
            scripts.append((parent, born, died))
    if len(scripts) != expected:
        sys.exit("anatomy.py: counted %d scripts, the command was given %d" % (len(scripts), expected))
    # Each exit frees a slot for the next fork: the scripts started before the first
    # exit are the first of each slot; every later fork pairs with the exits in turn.
    births = sorted(b for _, b, _ in scripts)
    deaths = sorted(d for _, _, d in scripts)
    first_wave = sum(1 for b in births if b < deaths[0])
    turnaround = [b - d for b, d in zip(births[first_wave:], deaths)]
    print(json.dumps({
        "first_fork_ms": round(min(b for _, b, _ in scripts) - start, 1),
        "lifetimes_ms": round(sum(d - b for _, b, d in scripts), 1),
        "last_exit_ms": round(max(d for _, _, d in scripts) - start, 1),
        "end_ms": round(wall, 1),
        "turnaround_ms": sorted(round(x, 1) for x in turnaround),
        "scripts": len(scripts),
    }))


if __name__ == "__main__":
    main()
