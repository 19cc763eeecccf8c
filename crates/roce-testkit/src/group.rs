//! A child in a process group of its own: everything it starts (a
//! launcher's ranks, a server's workers) is ended with it, through the
//! group, when the test is done with it or gives up.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A process in a process group of its own, ended (the whole group)
/// when dropped before it was waited for.
pub struct Group(Option<Child>);

impl Group {
    /// Starts `cmd` in a new process group, its output piped.
    pub fn spawn(mut cmd: Command) -> Group {
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Group(Some(child))
    }

    fn kill(c: &Child) {
        let pg = nix::unistd::Pid::from_raw(c.id() as i32);
        let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGKILL);
    }

    /// The child's process ID (also its process group's).
    pub fn id(&self) -> u32 {
        self.0.as_ref().expect("not waited for").id()
    }

    /// Whether the child has exited (or was waited for).
    pub fn exited(&mut self) -> bool {
        self.0
            .as_mut()
            .is_none_or(|c| c.try_wait().unwrap().is_some())
    }

    /// Waits at most until `end`: past it the group is ended and the
    /// output is what it printed, with `timed_out`. Output is read on
    /// threads so that a full pipe cannot stop the job.
    pub fn wait(mut self, end: Instant) -> (Output, bool) {
        let mut c = self.0.take().expect("waited once");
        let mut out = c.stdout.take().unwrap();
        let mut err = c.stderr.take().unwrap();
        let read_out = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = std::io::Read::read_to_end(&mut out, &mut v);
            v
        });
        let read_err = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = std::io::Read::read_to_end(&mut err, &mut v);
            v
        });
        let mut timed_out = false;
        while c.try_wait().unwrap().is_none() {
            if Instant::now() > end {
                Group::kill(&c);
                timed_out = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // Anything the child left in its group goes with it.
        Group::kill(&c);
        let status = c.wait().unwrap();
        let stdout = read_out.join().unwrap();
        let stderr = read_err.join().unwrap();
        (
            Output {
                status,
                stdout,
                stderr,
            },
            timed_out,
        )
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            Group::kill(c);
            let _ = c.wait();
        }
    }
}
