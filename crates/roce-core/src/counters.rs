//! Per-QP and per-device counters.

/// Counters of one QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Packets sent (all kinds).
    pub tx_packets: u64,
    /// Payload bytes sent.
    pub tx_bytes: u64,
    /// Packets received and accepted for processing.
    pub rx_packets: u64,
    /// Payload bytes received.
    pub rx_bytes: u64,
    /// Request packets sent again (go-back-N, timeouts, RNR).
    pub retransmitted: u64,
    /// Local ACK timeouts.
    pub timeouts: u64,
    /// PSN sequence error NAKs sent / received.
    pub seq_naks_sent: u64,
    /// PSN sequence error NAKs received.
    pub seq_naks_received: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Other NAKs (invalid request, remote access, remote operational) sent.
    pub error_naks_sent: u64,
    /// Other NAKs received.
    pub error_naks_received: u64,
    /// ACK packets sent (including coalesced ones that went out).
    pub acks_sent: u64,
    /// Deferred ACKs that followed the QP's answer (`DeviceConfig::ack_delay`).
    pub acks_after_answer: u64,
    /// Deferred ACKs that left at their deadline (nobody answered in time).
    pub ack_deadlines: u64,
    /// Duplicate requests received (re-ACKed or replayed).
    pub duplicates: u64,
    /// Duplicate READs served again.
    pub read_replays: u64,
    /// Duplicate atomics answered from the stored result.
    pub atomic_replays: u64,
    /// Packets dropped: out of sequence (beyond the expected PSN).
    pub drop_out_of_sequence: u64,
    /// Packets dropped: responses outside the outstanding window (ghost ACKs).
    pub drop_ghost_response: u64,
    /// Packets dropped: the QP state does not accept them.
    pub drop_bad_state: u64,
    /// Packets dropped: UD Q_Key mismatch.
    pub drop_qkey: u64,
    /// Packets dropped: no receive posted (UC/UD), or a UC message broken
    /// (a packet lost, or longer than its receive buffer).
    pub drop_no_recv: u64,
    /// Packets dropped: wrong source or destination address, P_Key or
    /// opcode for this QP.
    pub drop_invalid: u64,
    /// Requests dropped unexecuted because the responder's output queue
    /// was full (the requester resends them, as after a loss).
    pub drop_responder_full: u64,
    /// The most request PSNs this QP had sent and not yet seen
    /// acknowledged at once (RC; its window, as the peer's ACKs let it
    /// open, up to the per-packet window and the in-flight limit).
    pub max_outstanding: u64,
}

/// Counters of a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Datagrams handed to the device (every call of
    /// [`Device::handle_datagram`](crate::Device::handle_datagram) and
    /// [`Device::handle_udp`](crate::Device::handle_udp)).
    pub rx_datagrams: u64,
    /// Datagrams that did not parse as RoCE v2.
    pub rx_malformed: u64,
    /// Datagrams dropped for their ICRC: it did not match the one computed
    /// over what arrived (with [`IcrcCheck::Require`](crate::IcrcCheck),
    /// for an IPv4 datagram without its identification: under none it may
    /// have had). The ICRC is the engine's alone to check
    /// (docs/protocol.md §4); these counters are its only record.
    pub rx_bad_icrc: u64,
    /// Datagrams taken without a verified ICRC: a whole datagram given as
    /// not exact ([`RxMeta::header_exact`](crate::RxMeta::header_exact)
    /// false), or an IPv4 one without its identification under
    /// [`IcrcCheck::Off`](crate::IcrcCheck::Off), or under
    /// [`IcrcCheck::Count`](crate::IcrcCheck::Count) matching none.
    pub rx_icrc_unverified: u64,
    /// IPv4 datagrams received without their identification whose ICRC
    /// was verified by assuming it (0, or a UDP GSO segment number): a
    /// part of the verified ones, as against a damage-free header the
    /// ICRC cannot tell apart from another identification with
    /// probability 2^-25.
    pub rx_icrc_assumed_ipv4_id: u64,
    /// Datagrams taken without computing their ICRC because another
    /// engine of this host handed them over untouched
    /// ([`DeviceConfig::icrc_trust_host`](crate::DeviceConfig::icrc_trust_host)):
    /// not verified here, and not counted in `rx_icrc_unverified`, since
    /// their sender made the very bytes taken (and computed the ICRC over
    /// them, or left it out for this receiver: `tx_icrc_deferred`).
    pub rx_icrc_host_trusted: u64,
    /// Datagrams for a QP that does not exist (and, on a shared device,
    /// that no other process owns: handed back forwarded).
    pub rx_unknown_qp: u64,
    /// Datagrams handed back as [`RxOutcome::Foreign`](crate::RxOutcome::Foreign):
    /// a shared device had no QP, listener or connection they name, and
    /// another process may (docs/host.md). A datagram handed back and then
    /// submitted again, forwarded, counts twice in `rx_datagrams`.
    pub rx_foreign: u64,
    /// CNPs received.
    pub rx_cnp: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Datagrams given without their ICRC, because the driver said their
    /// receiver does not check it
    /// ([`Device::poll_transmit_icrc_if`](crate::Device::poll_transmit_icrc_if)):
    /// a part of `tx_datagrams`.
    pub tx_icrc_deferred: u64,
}
