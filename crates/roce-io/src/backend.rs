//! The [`Backend`] trait (the [`PacketBatch`] arena that carries datagrams
//! in and out of it is in `batch.rs`).

use std::io;
use std::net::IpAddr;

use roce_wire::{Owner, RxHeader, Transmit};

pub use crate::batch::PacketBatch;

/// Time in nanoseconds.
///
/// Backends never read a clock: the caller passes `now` into every call. Tests
/// on the in-memory [`Fabric`](crate::Fabric) use virtual time (any `u64`
/// that only moves forward); real-time users pass a monotonic clock, e.g.
/// nanoseconds since a fixed [`std::time::Instant`].
pub type Nanos = u64;

/// Per-datagram metadata that a receiving backend attaches: the type the
/// engine takes too (`roce_core::Device::handle_udp` and
/// `handle_datagram`).
pub use roce_wire::RxMeta;

/// What [`Backend::forward`] did with a received datagram that is not this
/// process's (docs/host.md, "Forwarding").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Forwarded {
    /// Handed to the live process of this user that owns it on the
    /// datagram's destination address (through a same-host ring,
    /// docs/shm.md). As with a UDP send, a full ring may still drop it
    /// (counted), and RC recovers.
    Sent,
    /// No other process owns it, or its owner is gone (its dead slot is
    /// reaped then): the caller drops the datagram, or answers it as the
    /// kernel would (a CM REJ for no listener). Also for a datagram that
    /// was forwarded already: it is never handed on twice, nor back to
    /// this process.
    NoOwner,
    /// A live process owns it but could not be handed it now (its
    /// same-host link refused lately or broke): the caller drops it
    /// without answering, as a lost datagram, and its sender's
    /// retransmission tries again. Answering for the owner (a REJ or DREP
    /// for a connection that is not this process's) would end a
    /// connection that is alive.
    Unreachable,
    /// This backend does not share its address with other processes
    /// (the default): nothing can own the datagram but this process.
    Unshared,
}

/// What [`Backend::transmit_in_place`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InPlace {
    /// The backend has no buffer of its own for the next datagram now
    /// (the default; middleware; the UDP backend without a same-host
    /// ring to the last destination, or with that ring full): the
    /// builder was not called, push the datagram into a batch.
    Unavailable,
    /// The builder gave no datagram.
    Nothing,
    /// The builder gave a datagram and the backend took it: it goes with
    /// the next [`Backend::send`] (an empty batch will do).
    Taken,
}

/// Builds one datagram in a backend's own buffer
/// ([`Backend::transmit_in_place`]): gets the buffer and `here`, which
/// says whether a datagram sent as a given [`Transmit`] stays in it (then
/// its ICRC may be left out, as [`Backend::needs_icrc`] says no); returns
/// the datagram's `Transmit` and whether its ICRC is there, or `None`
/// for no datagram. roce-core's `Device::poll_transmit_icrc_if` with
/// `|t| !here(t)` is one.
pub type BuildInPlace<'a> =
    dyn FnMut(&mut [u8], &mut dyn FnMut(&Transmit) -> bool) -> Option<(Transmit, bool)> + 'a;

/// Something that moves RoCE v2 datagrams to and from the network, a
/// batch at a time: whole IP datagrams (IPv4 or IPv6 header, UDP, BTH,
/// ..., ICRC; no Ethernet header) out, and in either whole or, from a
/// receiver that does not see the IP header (a UDP socket), as UDP
/// payloads beside an [`RxHeader`] ([`PacketBatch::header`]).
///
/// Backends are driven: they never block on a timer or read a clock; every
/// call gets the current time. Middleware ([`FaultInjector`],
/// [`PcapTap`]) wraps any backend and is a backend itself, so they stack.
///
/// [`FaultInjector`]: crate::FaultInjector
/// [`PcapTap`]: crate::PcapTap
pub trait Backend {
    /// Local IP addresses this endpoint owns.
    fn local_addrs(&self) -> &[IpAddr];

    /// Whether a datagram to be sent as `t` needs its ICRC: asked by a
    /// driver before the engine computes it (roce-core's
    /// `Device::poll_transmit_icrc_if`), which then pushes the datagram
    /// with [`PacketBatch::push_transmit_icrc_with`]. True (the default)
    /// for anything that goes on a wire, and for middleware, which may
    /// record or damage what it passes on; false only where the datagram
    /// goes to a receiver that does not need it: the UDP backend's
    /// same-host rings, whose reader computes it when its engine checks
    /// it (docs/shm.md). A datagram pushed without its ICRC whose way is
    /// then not such a receiver is dropped (and counted), never sent
    /// with a wrong ICRC.
    fn needs_icrc(&mut self, now: Nanos, t: &Transmit) -> bool {
        let _ = (now, t);
        true
    }

    /// Has the next datagram built straight into the backend's own
    /// buffer, where that saves a copy: the UDP backend's same-host ring
    /// to the destination it sent to last, where the record is written
    /// around it (docs/shm.md). A datagram that then goes elsewhere is
    /// copied out and sent as [`send`](Self::send) would. Only for a
    /// caller with no datagram of its own waiting to be sent (the order
    /// of its datagrams is kept so). The default:
    /// [`InPlace::Unavailable`].
    fn transmit_in_place(&mut self, now: Nanos, build: &mut BuildInPlace<'_>) -> InPlace {
        let _ = (now, build);
        InPlace::Unavailable
    }

    /// Sends the datagrams of `batch` in order. Returns how many, from the
    /// front, were taken; the caller offers the rest again later (see
    /// [`PacketBatch::drain_front`]). A datagram the backend takes but
    /// cannot deliver (no route, malformed, queue full) counts as taken and
    /// is counted in [`counters`](Self::counters).
    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize>;

    /// Clears `batch`, then fills it with up to `batch.capacity()` datagrams
    /// that have arrived by `now`. Returns how many.
    fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize>;

    /// The earliest time at which something that is not receivable now will
    /// become so (a datagram still in flight on a virtual-time fabric, a
    /// packet a fault injector holds back), if known. A time at or before
    /// `now` means `recv` (or `send`, for held outgoing packets) has work to
    /// do now. Call again after every `send` / `recv`.
    fn poll_at(&self) -> Option<Nanos> {
        None
    }

    /// Counters (sent, received, dropped by reason, ...) as name/value pairs.
    /// Middleware lists its own counters followed by those of the backend it
    /// wraps.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// A descriptor that polls readable when [`recv`](Self::recv) may
    /// have datagrams (once `recv` has returned 0), for a thread to sleep
    /// on; `None` (the default) when the backend cannot wake a sleeper, so
    /// a progress engine must nap with a bounded timeout instead.
    #[cfg(unix)]
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// Called by a thread about to sleep on [`wait_fd`](Self::wait_fd)
    /// after [`recv`](Self::recv) returned 0: makes sure the descriptor
    /// turns readable when a datagram arrives from then on, and returns
    /// true when one arrived meanwhile (receive again instead of
    /// sleeping). A backend whose descriptor is readable whenever it has
    /// datagrams has nothing to do (the default). The UDP backend's
    /// same-host path asks its peers for a wake-up here rather than at
    /// every empty receive, so that a receiver that keeps polling costs
    /// its senders nothing (docs/shm.md).
    fn prepare_wait(&mut self, now: Nanos) -> bool {
        let _ = now;
        false
    }

    /// Makes `addr` one of this endpoint's local addresses, so that
    /// datagrams from it can be sent and to it received (a device's GID
    /// table grows into use). `Unsupported` (the default) from a backend
    /// whose addresses are fixed when it is made; middleware passes it on.
    fn add_local_addr(&mut self, addr: IpAddr) -> io::Result<()> {
        if self.local_addrs().contains(&addr) {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("this backend cannot add the local address {addr}"),
        ))
    }

    /// Claims `owner` (a QPN, a CM listener's service ID, a local
    /// communication ID) on the local address `local` for this process,
    /// among the processes of this user sharing that address
    /// (docs/host.md): `Ok(true)` when this process holds it now (or held
    /// it already), `Ok(false)` when another live process holds it (draw
    /// another QPN or comm ID; a listener is `EADDRINUSE`). A backend that
    /// shares nothing says `Ok(true)` (the default). QPN 1 is every
    /// process's and always `Ok(true)`.
    fn claim(&mut self, local: IpAddr, owner: Owner) -> io::Result<bool> {
        let _ = (local, owner);
        Ok(true)
    }

    /// Lets go of what [`claim`](Self::claim) took (the default: nothing
    /// to do). Releasing what this process does not hold does nothing.
    fn release(&mut self, local: IpAddr, owner: Owner) {
        let _ = (local, owner);
    }

    /// Hands a received datagram that is not this process's (the engine
    /// found no object for it and named its [`Owner`]) to the live
    /// process that owns `owner` on the datagram's destination address.
    /// `header`, `payload` and `meta` are as [`recv`](Self::recv) gave
    /// them: the UDP payload and what was known of its header, whose
    /// source (address, port, TOS, IPv4 identification when known) the
    /// owner receives as the original sender's, with
    /// [`RxMeta::forwarded`] set. Never hands a datagram back to this
    /// process, nor one that was forwarded already
    /// ([`Forwarded::NoOwner`]). The default: [`Forwarded::Unshared`].
    fn forward(
        &mut self,
        now: Nanos,
        header: RxHeader,
        payload: &[u8],
        meta: RxMeta,
        owner: Owner,
    ) -> Forwarded {
        let _ = (now, header, payload, meta, owner);
        Forwarded::Unshared
    }

    /// Stops taking datagrams that other processes sharing this
    /// endpoint's addresses may own: the kernel hands them to the others
    /// from now on, and they forward to this one what is its own
    /// (docs/host.md). What was already taken can still be received, to
    /// be forwarded. For a process about to exit or close: a datagram the
    /// kernel hands to one that stopped reading would be lost. True when
    /// there was anything to leave; the default: false.
    fn leave(&mut self) -> bool {
        false
    }
}

/// A boxed or borrowed backend is a backend: every call goes to the one
/// it holds.
macro_rules! delegate_backend {
    ($($ty:ty),*) => {$(
        impl<B: Backend + ?Sized> Backend for $ty {
            fn local_addrs(&self) -> &[IpAddr] {
                (**self).local_addrs()
            }
            fn needs_icrc(&mut self, now: Nanos, t: &Transmit) -> bool {
                (**self).needs_icrc(now, t)
            }
            fn transmit_in_place(&mut self, now: Nanos, build: &mut BuildInPlace<'_>) -> InPlace {
                (**self).transmit_in_place(now, build)
            }
            fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
                (**self).send(now, batch)
            }
            fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
                (**self).recv(now, batch)
            }
            fn poll_at(&self) -> Option<Nanos> {
                (**self).poll_at()
            }
            fn counters(&self) -> Vec<(&'static str, u64)> {
                (**self).counters()
            }
            #[cfg(unix)]
            fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
                (**self).wait_fd()
            }
            fn prepare_wait(&mut self, now: Nanos) -> bool {
                (**self).prepare_wait(now)
            }
            fn add_local_addr(&mut self, addr: IpAddr) -> io::Result<()> {
                (**self).add_local_addr(addr)
            }
            fn claim(&mut self, local: IpAddr, owner: Owner) -> io::Result<bool> {
                (**self).claim(local, owner)
            }
            fn release(&mut self, local: IpAddr, owner: Owner) {
                (**self).release(local, owner)
            }
            fn forward(
                &mut self,
                now: Nanos,
                header: RxHeader,
                payload: &[u8],
                meta: RxMeta,
                owner: Owner,
            ) -> Forwarded {
                (**self).forward(now, header, payload, meta, owner)
            }
            fn leave(&mut self) -> bool {
                (**self).leave()
            }
        }
    )*};
}

delegate_backend!(Box<B>, &mut B);

/// Smallest of two optional deadlines.
pub(crate) fn min_deadline(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_get_full_and_oversize() {
        let mut b = PacketBatch::new(3, 8);
        assert!(b.is_empty());
        assert_eq!((b.capacity(), b.slot_size()), (3, 8));
        assert!(!b.push(&[0; 9]), "longer than a slot");
        assert!(b.push(&[1, 2, 3]));
        assert!(b.push(&[4; 8]), "exactly a slot");
        assert!(b.push(&[5]));
        assert!(b.is_full());
        assert!(!b.push(&[6]));
        assert_eq!(b.len(), 3);
        assert_eq!(b.get(0), &[1, 2, 3]);
        assert_eq!(b.get(1), &[4; 8]);
        assert_eq!(b.get(2), &[5]);
        let all: Vec<&[u8]> = b.iter().collect();
        assert_eq!(all, vec![&[1u8, 2, 3][..], &[4; 8][..], &[5][..]]);
        b.clear();
        assert!(b.is_empty() && !b.is_full());
        assert!(b.push(&[7, 7]));
        assert_eq!(b.get(0), &[7, 7]);
    }

    #[test]
    fn push_with_in_place() {
        let mut b = PacketBatch::new(2, 16);
        assert!(b.push_with(|slot| {
            assert_eq!(slot.len(), 16);
            slot[..4].copy_from_slice(b"roce");
            4
        }));
        assert!(!b.push_with(|_| 0), "0 pushes nothing");
        assert!(!b.push_with(|_| 17), "too long pushes nothing");
        assert_eq!(b.len(), 1);
        assert!(b.push_with(|slot| {
            slot.fill(9);
            16
        }));
        let mut called = false;
        assert!(!b.push_with(|_| {
            called = true;
            1
        }));
        assert!(!called, "f is not called on a full batch");
        assert_eq!(b.get(0), b"roce");
        assert_eq!(b.get(1), &[9; 16]);
    }

    #[test]
    fn meta_defaults_and_set() {
        let mut b = PacketBatch::new(2, 4);
        let m = RxMeta::inexact();
        assert!(b.push_with_meta(&[1], m));
        assert!(b.push(&[2]));
        assert!(!b.meta(0).header_exact);
        assert!(b.meta(1).header_exact, "the default");
        b.set_meta(1, m);
        assert!(!b.meta(1).header_exact);
        // A reused slot does not inherit stale metadata.
        b.clear();
        assert!(b.push(&[3]));
        assert!(b.meta(0).header_exact);
    }

    #[test]
    fn payloads_keep_their_headers() {
        let h = RxHeader::new(
            "10.0.0.1:49152".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            2,
        )
        .with_ipv4_id(Some(0));
        let mut b = PacketBatch::new(3, 8);
        assert!(b.push(&[1]));
        let fwd = RxMeta::default().with_forwarded(true);
        assert!(b.push_payload_with(h, fwd, |slot| {
            slot[..2].copy_from_slice(&[2, 2]);
            2
        }));
        assert!(!b.push_payload_with(h, fwd, |_| 9), "longer than a slot");
        assert_eq!(b.len(), 2);
        assert_eq!((b.header(0), b.header(1)), (None, Some(h)));
        assert_eq!((b.get(1), b.meta(1).forwarded), (&[2u8, 2][..], true));
        // Moved to the front with their datagrams; a reused slot does not
        // inherit a header.
        b.drain_front(1);
        assert_eq!((b.len(), b.header(0)), (1, Some(h)));
        assert!(b.push(&[3]));
        assert_eq!(b.header(1), None);
        b.set_header(1, Some(h));
        assert_eq!(b.header(1), Some(h));
    }

    #[test]
    fn drain_front_keeps_order() {
        let mut b = PacketBatch::new(4, 4);
        for i in 0..4u8 {
            assert!(b.push(&vec![i; i as usize + 1]));
        }
        b.drain_front(1);
        assert_eq!(b.len(), 3);
        assert_eq!(b.get(0), &[1, 1]);
        assert_eq!(b.get(2), &[3, 3, 3, 3]);
        b.get_mut(0)[0] = 8;
        assert_eq!(b.get(0), &[8, 1]);
        b.drain_front(0);
        assert_eq!(b.len(), 3);
        b.drain_front(10);
        assert!(b.is_empty());
    }

    #[test]
    fn zero_sized_batches_are_harmless() {
        let mut b = PacketBatch::new(0, 64);
        assert!(b.is_full() && b.is_empty());
        assert!(!b.push(&[1]));
        let mut b = PacketBatch::new(2, 0);
        assert!(!b.push(&[1]));
        assert!(!b.push(&[]), "empty datagrams are not pushed");
    }

    #[test]
    #[should_panic]
    fn get_out_of_range_panics() {
        let b = PacketBatch::new(1, 4);
        let _ = b.get(0);
    }
}
