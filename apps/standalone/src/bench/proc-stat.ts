import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';

/**
 * CPU accounting from /proc: a process's user + system time (all its threads) in clock ticks.
 * The parsing is pure and unit-tested; reading is best effort (a process that exited reads as absent).
 */

export interface ProcStat {
  pid: number;
  comm: string;
  state: string;
  ppid: number;
  /** utime + stime, clock ticks. */
  cpuTicks: number;
  /** stime alone: time in the kernel (syscalls, loopback TCP), clock ticks. */
  systemTicks: number;
}

/** Parses /proc/<pid>/stat. The command name may hold spaces and parentheses: fields start after the last ')'. */
export function parseProcStat(text: string): ProcStat {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) throw new Error(`not a /proc stat line: ${text.slice(0, 80)}`);
  const pid = Number(text.slice(0, open).trim());
  const comm = text.slice(open + 1, close);
  // Fields after the name, numbered from 3 (state) in proc(5): utime is 14, stime is 15.
  const rest = text.slice(close + 2).trim().split(/\s+/);
  const field = (number: number) => {
    const value = rest[number - 3];
    if (value === undefined) throw new Error(`stat line has no field ${number}`);
    return value;
  };
  const utime = Number(field(14));
  const stime = Number(field(15));
  if (!Number.isFinite(pid) || !Number.isFinite(utime) || !Number.isFinite(stime)) throw new Error(`bad stat numbers: ${text.slice(0, 80)}`);
  return { pid, comm, state: field(3), ppid: Number(field(4)), cpuTicks: utime + stime, systemTicks: stime };
}

export function readProcStat(pid: number): ProcStat | undefined {
  try {
    return parseProcStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

let ticksPerSecond: number | undefined;
/** USER_HZ (almost always 100). */
export function clockTicksPerSecond(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** Pids of every process whose command name is `comm` (e.g. nats-server). */
export function pidsByCommand(comm: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readProcStat(Number(entry));
    if (stat?.comm === comm) pids.push(stat.pid);
  }
  return pids;
}

/** A group of processes whose CPU is summed (a service, Postgres, NATS). */
export interface ProcessGroup {
  name: string;
  pids: number[];
}

/** CPU ticks (all, and kernel only) per pid, per group, at one moment. */
export type CpuSnapshot = Map<string, Map<number, { cpuTicks: number; systemTicks: number }>>;

export function snapshotCpu(groups: ProcessGroup[]): CpuSnapshot {
  const snapshot: CpuSnapshot = new Map();
  for (const group of groups) {
    const ticks = new Map<number, { cpuTicks: number; systemTicks: number }>();
    for (const pid of group.pids) {
      const stat = readProcStat(pid);
      if (stat) ticks.set(pid, { cpuTicks: stat.cpuTicks, systemTicks: stat.systemTicks });
    }
    snapshot.set(group.name, ticks);
  }
  return snapshot;
}

/**
 * CPU seconds each group used between two snapshots (`kind` system: kernel time only). A pid present
 * only in `after` started during the interval and is counted from zero; a pid gone by `after` is lost
 * (its last interval is unknown).
 */
export function cpuSecondsBetween(before: CpuSnapshot, after: CpuSnapshot, ticksPerSecondValue: number, kind: 'cpuTicks' | 'systemTicks' = 'cpuTicks'): Map<string, number> {
  const result = new Map<string, number>();
  for (const [name, afterTicks] of after) {
    const beforeTicks = before.get(name) ?? new Map<number, { cpuTicks: number; systemTicks: number }>();
    let ticks = 0;
    for (const [pid, value] of afterTicks) ticks += Math.max(0, value[kind] - (beforeTicks.get(pid)?.[kind] ?? 0));
    result.set(name, ticks / ticksPerSecondValue);
  }
  return result;
}

/** Whole-machine CPU time from the first line of /proc/stat, in clock ticks. */
export interface MachineCpu {
  busyTicks: number;
  totalTicks: number;
}

/** Parses the aggregate `cpu` line of /proc/stat: idle and iowait are not busy; guest time is already in user. */
export function parseMachineCpu(text: string): MachineCpu {
  const line = text.split('\n').find((candidate) => candidate.startsWith('cpu '));
  if (!line) throw new Error('no aggregate cpu line in /proc/stat');
  const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = line.trim().split(/\s+/).slice(1).map(Number);
  const busyTicks = user + nice + system + irq + softirq + steal;
  return { busyTicks, totalTicks: busyTicks + idle + iowait };
}

export function readMachineCpu(): MachineCpu | undefined {
  try {
    return parseMachineCpu(readFileSync('/proc/stat', 'utf8'));
  } catch {
    return undefined;
  }
}

/** `pid` and every process descended from it (npm start: its embedded Postgres and the backends). */
export function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = readProcStat(Number(entry));
    if (!stat) continue;
    const siblings = children.get(stat.ppid) ?? [];
    siblings.push(stat.pid);
    children.set(stat.ppid, siblings);
  }
  const tree: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const next = queue.shift()!;
    tree.push(next);
    queue.push(...(children.get(next) ?? []));
  }
  return tree;
}

/**
 * Memory of a process in bytes: its proportional set size (shared pages divided among the processes
 * sharing them, so a group's sum does not count Postgres's shared buffers once per backend), else RSS.
 */
export function memoryBytes(pid: number): number {
  try {
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
    const pss = /^Pss:\s+(\d+) kB/m.exec(rollup);
    if (pss) return Number(pss[1]) * 1024;
  } catch {
    // No smaps_rollup (older kernels, another user's process): RSS below.
  }
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rss = /^VmRSS:\s+(\d+) kB/m.exec(status);
    return rss ? Number(rss[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** Each group's memory (sum of its processes' PSS), in bytes. */
export function groupMemory(groups: ProcessGroup[]): Map<string, number> {
  return new Map(groups.map((group) => [group.name, group.pids.reduce((total, pid) => total + memoryBytes(pid), 0)]));
}
