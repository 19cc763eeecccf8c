//! Protection domains and address handles.

use std::net::IpAddr;
use std::sync::Arc;

use roce_core::{AddressVector, PdId, Qkey, Qpn, UdDest};

use crate::context::Context;
use crate::error::CreateError;
use crate::state::Shared;

#[derive(Debug)]
struct PdInner {
    id: PdId,
    ctx: Context,
}

/// A protection domain (`ibv_pd`). A cheap handle; every object made from
/// it holds it.
#[derive(Clone, Debug)]
pub struct ProtectionDomain {
    inner: Arc<PdInner>,
}

impl PartialEq for ProtectionDomain {
    fn eq(&self, o: &ProtectionDomain) -> bool {
        Arc::ptr_eq(&self.inner, &o.inner)
    }
}

impl Eq for ProtectionDomain {}

impl Context {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> ProtectionDomain {
        let id = self.shared().core().dev.alloc_pd();
        ProtectionDomain::new(self.clone(), id)
    }
}

impl ProtectionDomain {
    pub(crate) fn new(ctx: Context, id: PdId) -> ProtectionDomain {
        ProtectionDomain {
            inner: Arc::new(PdInner { id, ctx }),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.inner.ctx.shared()
    }

    /// The engine's id of this PD.
    pub fn id(&self) -> PdId {
        self.inner.id
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// `ibv_create_ah`: an address handle for UD sends.
    pub fn create_ah(&self, attr: AhAttr) -> Result<AddressHandle, CreateError> {
        let local = self
            .context()
            .addrs()
            .get(attr.sgid_index as usize)
            .ok_or(CreateError::InvalidArgument("sgid_index"))?;
        if local.is_ipv4() != attr.dest.is_ipv4() {
            return Err(CreateError::InvalidArgument(
                "destination and source GID families differ",
            ));
        }
        self.shared().use_gid(attr.sgid_index)?;
        Ok(AddressHandle {
            attr,
            pd: self.clone(),
        })
    }
}

/// Attributes of an address handle (`ibv_ah_attr`, RoCE v2 subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AhAttr {
    /// The destination's address (its GID).
    pub dest: IpAddr,
    /// IPv4 TTL / IPv6 hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP in the upper six bits).
    pub traffic_class: u8,
    /// Index of the local address to send from.
    pub sgid_index: u8,
}

impl AhAttr {
    /// To `dest`, hop limit 64, traffic class 0, GID index 0.
    pub fn new(dest: IpAddr) -> AhAttr {
        AhAttr {
            dest,
            hop_limit: 64,
            traffic_class: 0,
            sgid_index: 0,
        }
    }
}

/// An address handle (`ibv_ah`): where a UD send goes.
///
/// The engine's UD work requests carry only the destination address, QPN
/// and Q_Key; hop limit, traffic class and source GID come from the
/// sending QP's own address vector (a roce-core limitation).
#[derive(Clone, Debug)]
pub struct AddressHandle {
    attr: AhAttr,
    pd: ProtectionDomain,
}

impl AddressHandle {
    /// The attributes.
    pub fn attr(&self) -> AhAttr {
        self.attr
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The UD destination of a send to `remote_qpn` with `qkey` (for
    /// [`QueuePair::post_send_ud_list`](crate::QueuePair::post_send_ud_list)).
    pub fn ud_dest(&self, remote_qpn: Qpn, qkey: Qkey) -> UdDest {
        let av = AddressVector {
            dest: self.attr.dest,
            sgid_index: self.attr.sgid_index,
            hop_limit: self.attr.hop_limit,
            traffic_class: self.attr.traffic_class,
            flow_label: 0,
        };
        UdDest {
            av,
            qpn: remote_qpn,
            qkey,
        }
    }
}
