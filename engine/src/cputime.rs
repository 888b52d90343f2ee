//! CPU time: this process's own (all threads), the CPUs it may run on, and how busy each of
//! the machine's CPUs was (/proc/stat), so a measurement can say who was busy while it ran:
//! the measured program, the one driving it, or something else on the machine.

use serde_json::{json, Value};

/// CPU time of this process, all its threads, user + system (ns).
pub fn process_cpu_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// CPU time of the calling thread, user + system (ns).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CPUs this process may run on (its affinity mask, e.g. set by taskset).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// One CPU's counters from /proc/stat, in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// user + nice + system: time spent running processes.
    pub tasks: u64,
    /// irq + softirq: interrupts and the kernel's deferred work (packet processing).
    pub interrupts: u64,
    /// Time a hypervisor ran something else instead of this (virtual) CPU.
    pub steal: u64,
    /// Everything, idle included.
    pub total: u64,
}

/// Per-CPU counters of /proc/stat's `cpuN` lines: (CPU number, counters).
pub fn parse_proc_stat(text: &str) -> Vec<(usize, CpuTicks)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        let Some(Ok(cpu)) = name.strip_prefix("cpu").map(str::parse::<usize>) else {
            continue;
        };
        let v: Vec<u64> = words.map_while(|w| w.parse().ok()).collect();
        if v.len() < 8 {
            continue;
        }
        // user nice system idle iowait irq softirq steal [guest guest_nice: inside user]
        out.push((
            cpu,
            CpuTicks {
                tasks: v[0] + v[1] + v[2],
                interrupts: v[5] + v[6],
                steal: v[7],
                total: v[..8].iter().sum(),
            },
        ));
    }
    out
}

/// A snapshot of the machine's CPUs; empty when /proc/stat cannot be read.
pub fn machine() -> Vec<(usize, CpuTicks)> {
    std::fs::read_to_string("/proc/stat")
        .map(|t| parse_proc_stat(&t))
        .unwrap_or_default()
}

/// What each CPU did between two snapshots, in seconds, as a JSON object of columns:
/// `cpu`, `tasks_s`, `interrupts_s`, `steal_s`, `total_s`.
pub fn machine_delta(before: &[(usize, CpuTicks)], after: &[(usize, CpuTicks)]) -> Value {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut cols: [Vec<Value>; 5] = Default::default();
    for (cpu, a) in after {
        let Some((_, b)) = before.iter().find(|(c, _)| c == cpu) else {
            continue;
        };
        let d = |x: u64, y: u64| x.saturating_sub(y) as f64 / hz;
        cols[0].push(json!(cpu));
        cols[1].push(json!(d(a.tasks, b.tasks)));
        cols[2].push(json!(d(a.interrupts, b.interrupts)));
        cols[3].push(json!(d(a.steal, b.steal)));
        cols[4].push(json!(d(a.total, b.total)));
    }
    let [cpu, tasks, interrupts, steal, total] = cols;
    json!({"cpu": cpu, "tasks_s": tasks, "interrupts_s": interrupts, "steal_s": steal,
           "total_s": total})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_lines_per_cpu() {
        let text = "cpu  10 0 5 100 1 0 2 0 0 0\n\
                    cpu0 4 1 2 50 1 3 4 5 0 0\n\
                    cpu1 6 0 3 50 0 0 0 0 0 0\n\
                    intr 12345\n";
        let got = parse_proc_stat(text);
        assert_eq!(got.len(), 2, "the aggregate line is not a CPU");
        assert_eq!(
            got[0],
            (
                0,
                CpuTicks {
                    tasks: 7,
                    interrupts: 7,
                    steal: 5,
                    total: 70
                }
            )
        );
        assert_eq!(got[1].0, 1);
        assert_eq!(got[1].1.total, 59);
    }

    #[test]
    fn own_cpu_time_grows_with_work() {
        let t0 = process_cpu_ns();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(process_cpu_ns() > t0);
        assert!(!allowed_cpus().is_empty());
    }
}
