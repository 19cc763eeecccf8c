//! The CM table's own rules: which local IDs it draws.

use super::*;

fn table() -> CmTable {
    CmTable::new(&mut Ids::new([5; 32]))
}

fn conn() -> Conn {
    Conn {
        state: CmState::Established,
        remote_id: 0x1234,
        tid: 1,
        peer: IpAddr::from([10, 0, 0, 2]),
        local: IpAddr::from([10, 0, 0, 1]),
        qpn: None,
        remote_qpn: Qpn::new(0x99),
        psn: Psn::new(0),
        param: ConnParam::default(),
        req: None,
        last: None,
        deadline: None,
        interval: 0,
        retries_left: 0,
        service_id: 0,
        refused_since: None,
        listen: None,
        mras: 0,
        pending: false,
        manual: false,
        qp_attr: None,
    }
}

/// Ends a connection with local ID `id`.
fn end(t: &mut CmTable, id: u32) {
    t.insert(id, conn());
    assert!(t.remove(id).is_some());
}

/// A local ID whose connection ended is not drawn again while it is
/// among the last RETIRED_CM_IDS retired; after that it may be.
#[test]
fn an_ended_connections_id_is_not_reused_soon() {
    // Tables from one seed draw the same IDs: `probe` shows what the
    // others will draw.
    let mut probe = table();
    let (first, second) = (probe.new_id(), probe.new_id());

    let mut t = table();
    end(&mut t, first);
    assert_eq!(t.new_id(), second, "the ended connection's ID came back");

    let mut t = table();
    end(&mut t, first);
    for id in (1..=RETIRED_CM_IDS as u32).filter(|&i| i != first) {
        end(&mut t, id);
    }
    // `first` has left the bounded quarantine (one in, one out).
    assert!(t.retired.contains(&1) && !t.retired.contains(&first));
    assert_eq!(t.new_id(), first);

    // A live ID is never drawn either.
    let mut t = table();
    t.insert(first, conn());
    assert_eq!(t.new_id(), second);
}
