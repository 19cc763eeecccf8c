//! [`PacketBatch`]: the arena that carries datagrams in and out of a
//! [`Backend`](crate::Backend).

use roce_wire::{RxHeader, RxMeta, Transmit};

/// A batch of packet buffers: one contiguous arena of `capacity` fixed-size
/// slots, so nothing is allocated per packet.
///
/// Senders fill it with [`push`](Self::push) or, to emit headers straight
/// into the arena, [`push_with`](Self::push_with); receivers clear it and
/// push what arrived: a whole IP datagram with
/// [`push_with_meta`](Self::push_with_meta), or the UDP payload of one
/// whose header the receiver did not see (a UDP socket's, a same-host
/// ring's) with [`push_payload_with`](Self::push_payload_with), beside
/// what it knows of that header ([`RxHeader`], [`header`](Self::header)).
///
/// ```
/// use roce_io::PacketBatch;
/// let mut batch = PacketBatch::new(2, 64);
/// assert!(batch.push(&[0x45, 0, 0, 20]));
/// assert!(batch.push_with(|slot| {
///     slot[..3].copy_from_slice(b"abc");
///     3
/// }));
/// assert!(batch.is_full());
/// assert!(!batch.push(b"no room"));
/// assert_eq!(batch.get(1), b"abc");
/// ```
#[derive(Clone)]
pub struct PacketBatch {
    arena: Box<[u8]>,
    lens: Box<[usize]>,
    metas: Box<[RxMeta]>,
    /// The IP and UDP header of each received UDP payload (`None`: the
    /// slot holds a whole IP datagram).
    headers: Box<[Option<RxHeader>]>,
    /// How to send each datagram, when pushed with it.
    transmits: Box<[Option<Transmit>]>,
    /// Pushed by [`PacketBatch::push_transmit_with`] and not handed out
    /// mutably since ([`PacketBatch::intact`]).
    intact: Box<[bool]>,
    /// Pushed by [`PacketBatch::push_transmit_icrc_with`] without its
    /// ICRC ([`PacketBatch::icrc_present`]).
    no_icrc: Box<[bool]>,
    slot_size: usize,
    len: usize,
}

impl PacketBatch {
    /// A batch of `capacity` slots of `slot_size` bytes each (for RoCE, the
    /// largest datagram: e.g. 4096 bytes of payload plus 128 of headers).
    ///
    /// Allocates `capacity * slot_size` bytes once.
    ///
    /// # Panics
    ///
    /// If `capacity * slot_size` overflows `usize`.
    pub fn new(capacity: usize, slot_size: usize) -> Self {
        let bytes = capacity
            .checked_mul(slot_size)
            .expect("PacketBatch size overflows usize");
        PacketBatch {
            arena: vec![0u8; bytes].into_boxed_slice(),
            lens: vec![0usize; capacity].into_boxed_slice(),
            metas: vec![RxMeta::default(); capacity].into_boxed_slice(),
            headers: vec![None; capacity].into_boxed_slice(),
            transmits: vec![None; capacity].into_boxed_slice(),
            intact: vec![false; capacity].into_boxed_slice(),
            no_icrc: vec![false; capacity].into_boxed_slice(),
            slot_size,
            len: 0,
        }
    }

    /// Empties the batch (the arena is kept, not zeroed).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Number of datagrams in the batch.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the batch holds no datagram.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when every slot is used.
    pub fn is_full(&self) -> bool {
        self.len == self.lens.len()
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Size of each slot: the largest datagram the batch can hold.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Copies `datagram` into the next free slot. Returns false, changing
    /// nothing, when the batch is full, the datagram is empty, or it is
    /// longer than a slot.
    pub fn push(&mut self, datagram: &[u8]) -> bool {
        self.push_with_meta(datagram, RxMeta::default())
    }

    /// Like [`push`](Self::push), with receive metadata.
    pub fn push_with_meta(&mut self, datagram: &[u8], meta: RxMeta) -> bool {
        let n = datagram.len();
        if n > self.slot_size {
            return false;
        }
        let pushed = self.push_with(|slot| {
            slot[..n].copy_from_slice(datagram);
            n
        });
        if pushed {
            self.metas[self.len - 1] = meta;
        }
        pushed
    }

    /// Fills the next free slot in place (zero-copy emit): `f` gets the whole
    /// slot (`slot_size` bytes, holding whatever an earlier datagram left
    /// there) and returns the length it wrote. Returns true when a datagram
    /// was pushed; false when the batch is full (then `f` is not called),
    /// when `f` returned 0, or when it returned more than the slot size.
    pub fn push_with(&mut self, f: impl FnOnce(&mut [u8]) -> usize) -> bool {
        if self.is_full() {
            return false;
        }
        let at = self.len * self.slot_size;
        let n = f(&mut self.arena[at..at + self.slot_size]);
        if n == 0 || n > self.slot_size {
            return false;
        }
        self.lens[self.len] = n;
        self.metas[self.len] = RxMeta::default();
        self.headers[self.len] = None;
        self.transmits[self.len] = None;
        self.intact[self.len] = false;
        self.no_icrc[self.len] = false;
        self.len += 1;
        true
    }

    /// Fills the next free slot in place with a received datagram's UDP
    /// payload (BTH to ICRC), as [`push_with`](Self::push_with) does, and
    /// keeps `header`, what the receiver knows of the IP and UDP header it
    /// came with, and `meta` beside it: no header is written in front of
    /// the payload (the engine takes the two apart,
    /// `roce_core::Device::handle_udp`). Returns as `push_with`.
    pub fn push_payload_with(
        &mut self,
        header: RxHeader,
        meta: RxMeta,
        f: impl FnOnce(&mut [u8]) -> usize,
    ) -> bool {
        let pushed = self.push_with(f);
        if pushed {
            self.metas[self.len - 1] = meta;
            self.headers[self.len - 1] = Some(header);
        }
        pushed
    }

    /// Fills the next free slot in place with an outgoing datagram and how
    /// to send it: `f` gets the whole slot, as for
    /// [`push_with`](Self::push_with), and returns the datagram's
    /// [`Transmit`] (`Device::poll_transmit` of roce-core gives one in its
    /// `Tx::Datagram`), or `None` to push nothing. Returns true when a datagram was pushed;
    /// false when the batch is full (then `f` is not called), `f` returned
    /// `None`, or its size is 0 or more than the slot.
    ///
    /// The datagram counts as the engine made it, its ICRC computed over
    /// these very bytes ([`intact`](Self::intact)), until someone takes
    /// it mutably ([`get_mut`](Self::get_mut)).
    pub fn push_transmit_with(&mut self, f: impl FnOnce(&mut [u8]) -> Option<Transmit>) -> bool {
        let mut sent = None;
        let pushed = self.push_with(|slot| match f(slot) {
            Some(t) => {
                sent = Some(t);
                t.size
            }
            None => 0,
        });
        if pushed {
            self.transmits[self.len - 1] = sent;
            self.intact[self.len - 1] = true;
        }
        pushed
    }

    /// [`push_transmit_with`](Self::push_transmit_with) for a datagram
    /// whose ICRC the engine may have left out: `f` returns its
    /// [`Transmit`] and whether its ICRC is there (false: its four bytes
    /// are not the ICRC, [`icrc_present`](Self::icrc_present); roce-core's
    /// `Device::poll_transmit_icrc_if` gives both, after asking
    /// [`Backend::needs_icrc`](crate::Backend::needs_icrc)).
    pub fn push_transmit_icrc_with(
        &mut self,
        f: impl FnOnce(&mut [u8]) -> Option<(Transmit, bool)>,
    ) -> bool {
        let mut with_icrc = true;
        let pushed = self.push_transmit_with(|slot| {
            f(slot).map(|(t, icrc)| {
                with_icrc = icrc;
                t
            })
        });
        if pushed {
            self.no_icrc[self.len - 1] = !with_icrc;
        }
        pushed
    }

    /// Whether the `i`-th datagram carries its ICRC: false only for one
    /// pushed by [`push_transmit_icrc_with`](Self::push_transmit_icrc_with)
    /// without it, for a backend that said it does not need it
    /// ([`Backend::needs_icrc`](crate::Backend::needs_icrc)); whoever
    /// needs it after all computes it (`roce_wire::icrc::fill`).
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn icrc_present(&self, i: usize) -> bool {
        assert!(i < self.len, "PacketBatch index {i} out of range");
        !self.no_icrc[i]
    }

    /// Whether the `i`-th datagram is as its sending engine made it: pushed
    /// by [`push_transmit_with`](Self::push_transmit_with) and not taken
    /// mutably since (middleware that damages or rewrites datagrams, a
    /// fault injector, copies them into a batch of its own with
    /// [`push_with`](Self::push_with), or rewrites them in place with
    /// [`get_mut`](Self::get_mut), and either way they are not). A
    /// same-host ring tells its receiver so (docs/shm.md, "What the
    /// receiver trusts"), whose engine may then take the datagram without
    /// computing its ICRC again.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn intact(&self, i: usize) -> bool {
        assert!(i < self.len, "PacketBatch index {i} out of range");
        self.intact[i]
    }

    /// How to send the `i`-th datagram: the [`Transmit`] it was pushed with
    /// ([`push_transmit_with`](Self::push_transmit_with),
    /// [`set_transmit`](Self::set_transmit)); for a datagram pushed
    /// without one (built by hand, replayed from a capture), what
    /// [`Transmit::of_datagram`] reads from its header. `None` when it is
    /// not a RoCE v2 datagram a backend can send.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn transmit(&self, i: usize) -> Option<Transmit> {
        assert!(i < self.len, "PacketBatch index {i} out of range");
        self.transmits[i]
            .filter(|t| t.size == self.lens[i])
            .or_else(|| Transmit::of_datagram(self.get(i)))
    }

    /// Sets the [`Transmit`] of the `i`-th datagram (middleware that
    /// moves datagrams from one batch to another keeps it this way).
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn set_transmit(&mut self, i: usize, t: Transmit) {
        assert!(i < self.len, "PacketBatch index {i} out of range");
        self.transmits[i] = Some(t);
    }

    /// The `i`-th datagram.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`, as slice indexing does.
    pub fn get(&self, i: usize) -> &[u8] {
        assert!(i < self.len, "PacketBatch index {i} out of range");
        let at = i * self.slot_size;
        &self.arena[at..at + self.lens[i]]
    }

    /// The `i`-th datagram, mutably (for middleware that rewrites
    /// headers): no longer [`intact`](Self::intact).
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.len, "PacketBatch index {i} out of range");
        self.intact[i] = false;
        let at = i * self.slot_size;
        &mut self.arena[at..at + self.lens[i]]
    }

    /// The datagrams in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.len).map(move |i| self.get(i))
    }

    /// The metadata of the `i`-th datagram (the default for datagrams pushed
    /// without metadata).
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn meta(&self, i: usize) -> RxMeta {
        assert!(i < self.len, "PacketBatch index {i} out of range");
        self.metas[i]
    }

    /// The IP and UDP header of the `i`-th datagram when it is a UDP
    /// payload ([`push_payload_with`](Self::push_payload_with)); `None`
    /// when it is a whole IP datagram.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn header(&self, i: usize) -> Option<RxHeader> {
        assert!(i < self.len, "PacketBatch index {i} out of range");
        self.headers[i]
    }

    /// Sets what [`header`](Self::header) gives for the `i`-th datagram
    /// (middleware that moves received datagrams from one batch to
    /// another keeps it this way).
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn set_header(&mut self, i: usize, header: Option<RxHeader>) {
        assert!(i < self.len, "PacketBatch index {i} out of range");
        self.headers[i] = header;
    }

    /// Sets the metadata of the `i`-th datagram.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    pub fn set_meta(&mut self, i: usize, meta: RxMeta) {
        assert!(i < self.len, "PacketBatch index {i} out of range");
        self.metas[i] = meta;
    }

    /// Removes the first `n` datagrams (for example those a backend's
    /// [`send`](crate::Backend::send) took), moving the rest to the front in order.
    /// Removes everything when `n >= len`.
    pub fn drain_front(&mut self, n: usize) {
        if n >= self.len {
            self.len = 0;
            return;
        }
        for i in n..self.len {
            let (src, dst) = (i * self.slot_size, (i - n) * self.slot_size);
            let l = self.lens[i];
            self.arena.copy_within(src..src + l, dst);
            self.lens[i - n] = l;
            self.metas[i - n] = self.metas[i];
            self.headers[i - n] = self.headers[i];
            self.transmits[i - n] = self.transmits[i];
            self.intact[i - n] = self.intact[i];
            self.no_icrc[i - n] = self.no_icrc[i];
        }
        self.len -= n;
    }
}

impl std::fmt::Debug for PacketBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketBatch")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .field("slot_size", &self.slot_size)
            .field("lens", &&self.lens[..self.len])
            .finish()
    }
}
