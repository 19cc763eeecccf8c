//! Helpers shared by the end-to-end tests of the `roce` binary.
#![allow(dead_code, unreachable_pub)]

use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// The `roce` binary under test.
pub fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

/// A child process (usually a server) killed if the test fails before
/// waiting for it.
pub struct Guard(pub Option<Child>);

impl Guard {
    /// Waits for the child (at most `limit`, then kills it and fails).
    pub fn wait(mut self, limit: Duration) -> Output {
        let mut c = self.0.take().unwrap();
        let end = Instant::now() + limit;
        while c.try_wait().unwrap().is_none() {
            if Instant::now() > end {
                let _ = c.kill();
                panic!("the server did not finish in {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        c.wait_with_output().unwrap()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
        }
    }
}
