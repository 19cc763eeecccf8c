//! Placing busy-polling threads on CPUs of their own.
//!
//! Two threads that busy-poll each other (the two ends of a latency test in
//! one process) make no progress while they share a CPU: each waits for the
//! other's time slice. The scheduler moves one of them to an idle CPU only
//! after its load balancer notices, which on a two-CPU machine was seen to
//! take about 12 ms, with round trips of ~220 µs instead of ~8 µs until then.
//! A program that starts both ends can place them itself: `roce perf` does
//! for its in-process latency tests. The placement is the program's, so it
//! lives here and not in the libraries.

use std::io;

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The CPUs the calling thread may run on, in increasing order.
pub(crate) fn allowed_cpus() -> io::Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0)).map_err(io::Error::from)?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// Restricts the calling thread (and the threads it starts afterwards) to
/// CPU `cpu`.
pub(crate) fn pin_current_thread(cpu: usize) -> io::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(io::Error::from)?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_sees_only_its_cpu() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(last).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![last]);
            // Threads started from here inherit the placement.
            let inner = std::thread::spawn(allowed_cpus).join().unwrap().unwrap();
            assert_eq!(inner, vec![last]);
        })
        .join()
        .unwrap();
        // The calling thread keeps its own set.
        assert_eq!(allowed_cpus().unwrap(), cpus);
    }
}
