//! What a local sandbox's processes use now, read from `/proc` for the pids its cgroup (or the
//! rootless watchdog) lists: the same source in every mode, so metrics mean the same everywhere.

use std::fs;

use crate::local::watchdog::private_bytes;

/// CPU seconds (user + system) and private resident bytes of these processes together.
pub(crate) fn process_usage(pids: &[u32]) -> (f64, u64) {
    let ticks = rustix::param::clock_ticks_per_second().max(1) as f64;
    pids.iter().fold((0.0, 0), |(cpu, memory), &pid| {
        (cpu + cpu_ticks(pid) as f64 / ticks, memory + private_bytes(pid))
    })
}

/// `utime + stime` of `/proc/<pid>/stat` (fields 14 and 15), 0 when the process is gone.
fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    // The command name (field 2) may hold spaces and parentheses: count from its closing one.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return 0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime field 15.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    field(14) + field(15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_uses_cpu_and_memory() {
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let (cpu, memory) = process_usage(&[std::process::id()]);
        assert!(cpu > 0.0, "cpu {cpu}");
        assert!(memory > 0, "memory {memory}");
        assert_eq!(process_usage(&[u32::MAX]), (0.0, 0));
    }
}
