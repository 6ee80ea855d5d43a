//! Which process is which, from `/proc`: a PID with its start time names one process for good
//! (a PID alone may be reused), and what a process started.

/// A live (not zombie) process's start time, in clock ticks since boot (`/proc/PID/stat`,
/// field 22).
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after the last.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Whether the process that started at `start` as `pid` still runs.
pub(crate) fn alive(pid: u32, start: u64) -> bool {
    pid != 0 && start_time(pid) == Some(start)
}

/// This host's clock, in milliseconds since the epoch (0 before it). With a store, times that
/// hosts compare come from the store's clock instead (`Store::now_ms`).
pub(crate) fn now_ms() -> u64 {
    epoch_ms(std::time::SystemTime::now())
}

/// `t` in milliseconds since the epoch (0 before it).
pub(crate) fn epoch_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// This process, as `PID.START`: a name no other process ever has.
pub(crate) fn me() -> String {
    let pid = std::process::id();
    format!("{pid}.{}", start_time(pid).unwrap_or(0))
}

/// Whether any process of the process group `group` still runs (a zombie, dead and waiting for
/// its parent to reap it, does not): from `/proc/*/stat`.
pub(crate) fn group_runs(group: u32) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    procs.filter_map(Result::ok).any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { return false };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        // After the command name (in parentheses, may hold spaces): state, ppid, pgrp.
        let Some(fields) = stat.get(stat.rfind(')').map_or(0, |i| i + 1)..) else { return false };
        let fields: Vec<&str> = fields.split_whitespace().collect();
        fields.first() != Some(&"Z") && fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(group)
    })
}

/// The children of a process (`/proc/PID/task/*/children`).
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_process_is_alive_and_a_reused_pid_is_not() {
        let me = std::process::id();
        let start = start_time(me).expect("our own start time");
        assert!(alive(me, start));
        assert!(!alive(me, start + 1), "another process");
        assert!(!alive(0, start));
    }
}
