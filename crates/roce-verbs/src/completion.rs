//! [`Completion`]: a work completion as the application sees it.

use std::ops::Deref;

use roce_core::{Wc, WcStatus};

/// A work completion as the application sees it: the engine's [`Wc`] with
/// the application's `wr_id`, plus the buffer of an owned-buffer work
/// request ([`QueuePair::post_send_owned`](crate::QueuePair::post_send_owned),
/// [`QueuePair::post_recv_owned`](crate::QueuePair::post_recv_owned)),
/// handed back whatever the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The completion.
    pub wc: Wc,
    /// The owned buffer of the work request, if it had one.
    pub buffer: Option<Vec<u8>>,
}

impl Completion {
    /// True when the work request succeeded.
    pub fn is_success(&self) -> bool {
        self.wc.status == WcStatus::Success
    }

    /// Takes the owned buffer out.
    pub fn take_buffer(&mut self) -> Option<Vec<u8>> {
        self.buffer.take()
    }
}

impl Deref for Completion {
    type Target = Wc;
    fn deref(&self) -> &Wc {
        &self.wc
    }
}
