#!/usr/bin/env python3
"""Where a run's idle CPU time went: for each stretch a CPU sat idle (longer than MIN_US), which
threads were runnable on another CPU meanwhile, and how they became runnable (woken by whom,
or switched out runnable: preempted, or yielding). Idle time with work queued elsewhere is the
scheduler not moving it; idle time with nothing runnable is everyone waiting for someone.
docs/benchmarks.md ("Idle CPUs beside queued work: a make job's stalls"):

  perf sched record -o /tmp/sched.data -- nosefs run --at MNT -- make -s -j2 -C MNT/tree
  scripts/idle-attribution.py /tmp/sched.data [MIN_US]
"""
import collections
import re
import subprocess
import sys

EVENT = re.compile(r'\s*(\S.*?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\S+):\s+(.*)')


def base(comm):
    """A thread's name without its per-CPU or per-thread suffix."""
    return comm.split('/')[0]


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else 'perf.data'
    min_s = (float(sys.argv[2]) if len(sys.argv) > 2 else 200.0) / 1e6
    script = subprocess.run(
        ['perf', 'script', '-i', data, '-F', 'comm,pid,cpu,time,event,trace'],
        capture_output=True, text=True, check=True).stdout
    runnable = {}  # pid -> (cpu, comm, how it became runnable)
    idle_since = {}
    by_cause = collections.Counter()
    count = collections.Counter()
    idle_total = queued_total = 0.0
    for line in script.splitlines():
        m = EVENT.match(line)
        if not m:
            continue
        comm, _pid, cpu, t, event, rest = m.groups()
        cpu, t = int(cpu), float(t)
        fields = dict(kv.split('=', 1) for kv in re.findall(r'(\w+=\S+)', rest))
        if event == 'sched_waking':
            pid = int(fields['pid'])
            runnable[pid] = (int(fields['target_cpu']), fields['comm'], 'woken by ' + base(comm))
        elif event == 'sched_migrate_task':
            pid = int(fields['pid'])
            if pid in runnable:
                runnable[pid] = (int(fields['dest_cpu']),) + runnable[pid][1:]
        elif event == 'sched_switch':
            prev, nxt = int(fields['prev_pid']), int(fields['next_pid'])
            if prev == 0 and cpu in idle_since:
                idle = t - idle_since.pop(cpu)
                idle_total += idle
                if idle >= min_s:
                    queued = {(base(c), how) for p, (c_cpu, c, how) in runnable.items()
                              if c_cpu != cpu and p != nxt}
                    if queued:
                        queued_total += idle
                    for key in queued or {('(nothing runnable elsewhere)', '')}:
                        by_cause[key] += idle
                        count[key] += 1
            if fields['prev_state'].startswith('R') and prev != 0:
                how = 'switched out runnable, for ' + base(fields['next_comm'])
                runnable[prev] = (cpu, fields['prev_comm'], how)
            else:
                runnable.pop(prev, None)
            runnable.pop(nxt, None)
            if nxt == 0:
                idle_since[cpu] = t
    print('idle CPU time %.1f ms; in stretches of %.0f us or more with work queued on another '
          'CPU: %.1f ms' % (idle_total * 1e3, min_s * 1e6, queued_total * 1e3))
    print('(a stretch counts once for each thread queued elsewhere during it)')
    for (who, how), seconds in by_cause.most_common(20):
        print('%9.1f ms %6d  %s %s' % (seconds * 1e3, count[(who, how)], who, how))


if __name__ == '__main__':
    main()
