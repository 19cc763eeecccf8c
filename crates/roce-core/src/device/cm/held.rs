//! REQs that came for a port whose listener is expected a moment later
//! (`Device::cm_expect_listen`, or a listener that just closed:
//! [`RELISTEN_GRACE`]): kept, a few of them, and handled as if they had
//! just arrived once the listener is there, so that the peer connects at
//! once instead of after its REQ's resend timeout (about a second for
//! this CM, four or more for Linux's).

use std::net::IpAddr;

use roce_wire::cm::CmMessage;

use super::super::Device;
use super::RELISTEN_GRACE;
use crate::Nanos;

/// Held REQs at most (the oldest goes first): a peer whose REQ is not
/// among them still resends it.
const MAX_HELD: usize = 16;
/// The largest MAD kept (a MAD is 256 bytes).
const MAX_MAD: usize = 256;

/// One REQ held.
#[derive(Debug)]
pub(crate) struct HeldReq {
    service: u64,
    since: Nanos,
    peer: IpAddr,
    local: IpAddr,
    mad: Vec<u8>,
}

impl Device {
    /// Keeps the REQ MAD `mad` for `service` from `peer` to `local` (left
    /// unanswered by `on_req`), unless the same one is kept already.
    pub(super) fn hold_req(
        &mut self,
        now: Nanos,
        service: u64,
        peer: IpAddr,
        local: IpAddr,
        mad: &[u8],
    ) {
        if mad.len() > MAX_MAD {
            return;
        }
        let held = &mut self.cm.held;
        if held
            .iter()
            .any(|h| h.peer == peer && h.local == local && h.mad == mad)
        {
            return;
        }
        if held.len() >= MAX_HELD {
            held.pop_front();
        }
        held.push_back(HeldReq {
            service,
            since: now,
            peer,
            local,
            mad: mad.to_vec(),
        });
    }

    /// A listener on `service` now: its held REQs are handled at the
    /// next timer run, which is due at once.
    pub(super) fn release_held(&mut self, service: u64) {
        if self.cm.held.iter().any(|h| h.service == service) {
            self.cm.replay = true;
        }
    }

    /// Handles the held REQs whose listener is there now, and forgets
    /// those held longer than [`RELISTEN_GRACE`].
    pub(super) fn replay_held(&mut self, now: Nanos) {
        if !std::mem::take(&mut self.cm.replay) {
            return;
        }
        let held = std::mem::take(&mut self.cm.held);
        for h in held {
            if self.cm.listens_on(h.service) {
                if let Ok((hdr, CmMessage::Req(r))) = CmMessage::parse_mad(&h.mad) {
                    self.cm.counters.replayed_reqs += 1;
                    self.on_req(now, &hdr, &r, h.peer, h.local);
                }
            } else if now.saturating_sub(h.since) < RELISTEN_GRACE {
                self.cm.held.push_back(h);
            }
        }
    }
}
