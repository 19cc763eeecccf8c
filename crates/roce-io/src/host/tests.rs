//! The table within one process: two attachments of one file behave as
//! two processes (each has its own open file, so its own liveness lock).

use super::*;

const TCP: u32 = 0x0106;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn two(dir: &Path) -> (HostTable, HostTable) {
    let a = HostTable::attach_in(dir, ip("127.0.0.1"), 4791, b"a").unwrap();
    let b = HostTable::attach_in(dir, ip("127.0.0.1"), 4791, b"b").unwrap();
    (a, b)
}

fn hold(id: u64, addr: &str, reuse: bool) -> PortHolder {
    PortHolder {
        slot: 0,
        id,
        addr: ip(addr),
        reuse,
        afonly: false,
    }
}

#[test]
fn a_file_is_made_0600_and_each_attachment_has_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two(dir.path());
    assert_ne!(a.slot(), b.slot());
    use std::os::unix::fs::MetadataExt;
    let st = std::fs::metadata(a.path()).unwrap();
    assert_eq!(st.mode() & 0o777, 0o600);
    assert_eq!(st.len(), layout::FILE_LEN as u64);
    let live = a.live_slots().unwrap();
    assert_eq!(live.len(), 2);
    assert_eq!(b.slot_info(a.slot()).unwrap().name.as_bytes(), b"a");
    assert_eq!(live[0].pid, std::process::id());
    assert!(live[0].start_time > 0);
    // Another address or port is another file.
    let c = HostTable::attach_in(dir.path(), ip("127.0.0.2"), 4791, b"c").unwrap();
    assert_eq!(c.slot(), 0);
    assert_ne!(c.path(), a.path());
    assert!(matches!(
        HostTable::attach_in(dir.path(), ip("127.0.0.1"), 4791, &[0; NAME_MAX + 1]),
        Err(HostError::NameTooLong)
    ));
}

#[test]
fn entries_are_claimed_once_released_by_their_owner_and_freed_on_detach() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two(dir.path());
    let g0 = a.generation();
    a.claim_qpn(0x11).unwrap();
    assert!(a.generation() > g0, "an update moves the generation");
    assert!(matches!(b.claim_qpn(0x11), Err(HostError::Taken(s)) if s == a.slot()));
    assert!(matches!(a.claim_qpn(0x11), Err(HostError::Taken(_))));
    assert!(matches!(
        b.claim_qpn(1 << 24),
        Err(HostError::InvalidQpn(_))
    ));
    assert!(matches!(b.release_qpn(0x11), Err(HostError::NotHeld)));
    assert_eq!(b.owner_of_qpn(0x11).unwrap().slot, a.slot());
    assert_eq!(b.owner_of_qpn(0x12), None);
    assert_eq!(b.qpn_slot(0x11), Some(a.slot()));
    assert_eq!(b.qpn_slot(0x12), None);
    a.claim_listener(0x0106_0000_0000_1234).unwrap();
    assert!(b.claim_listener(0x0106_0000_0000_1234).is_err());
    b.claim_comm_id(0xdead_beef).unwrap();
    assert_eq!(a.owner_of_comm_id(0xdead_beef).unwrap().slot, b.slot());
    assert_eq!(
        b.owner_of_listener(0x0106_0000_0000_1234)
            .unwrap()
            .name
            .as_bytes(),
        b"a"
    );
    assert_eq!(a.held(), [1, 1, 0, 0]);
    a.release_qpn(0x11).unwrap();
    b.claim_qpn(0x11).unwrap();
    let a_slot = a.slot();
    drop(a);
    assert_eq!(b.slot_info(a_slot), None);
    assert_eq!(b.owner_of_listener(0x0106_0000_0000_1234), None);
    assert_eq!(b.held(), [1, 0, 1, 0]);
    b.claim_listener(0x0106_0000_0000_1234).unwrap();
}

#[test]
fn a_slot_whose_file_is_closed_without_detaching_is_dead_and_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two(dir.path());
    a.claim_qpn(0x42).unwrap();
    a.bind_port(TCP, 7471, hold(1, "127.0.0.1", false)).unwrap();
    let s = a.slot();
    // As a SIGKILL does: the file closes, nothing is cleaned.
    let a = std::mem::ManuallyDrop::new(a);
    // The kernel closing the dead process's file lets go of the
    // liveness lock; here it is let go by hand.
    a.file.drop_byte(usize::from(s)).unwrap();
    assert_eq!(b.owner_of_qpn(0x42).map(|o| o.slot), Some(s), "not yet");
    b.claim_qpn(0x42).unwrap();
    assert_eq!(b.slot_info(s), None, "the claim reclaimed the dead slot");
    assert_eq!(
        b.bind_port(TCP, 7471, hold(1, "127.0.0.1", false)).unwrap(),
        7471
    );
    assert!(b.reap(s).is_ok_and(|r| !r), "already reclaimed");
    let c = std::mem::ManuallyDrop::new(
        HostTable::attach_in(dir.path(), ip("127.0.0.1"), 4791, b"c").unwrap(),
    );
    c.claim_comm_id(5).unwrap();
    assert!(b.is_live(c.slot()).unwrap());
    c.file.drop_byte(usize::from(c.slot())).unwrap();
    assert!(!b.is_live(c.slot()).unwrap());
    assert_eq!(b.owner_of_comm_id(5).map(|o| o.slot), Some(c.slot()));
    assert!(b.reap(c.slot()).unwrap(), "reaped");
    assert_eq!(b.owner_of_comm_id(5), None);
    assert!(b.reap(b.slot()).is_ok_and(|r| !r), "alive");
}

#[test]
fn port_spaces_follow_the_kernel_rules_across_attachments() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two(dir.path());
    let port = |r: Result<u16, HostError>| match r {
        Ok(p) => Ok(p),
        Err(HostError::Port(e)) => Err(e),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        port(a.bind_port(TCP, 9000, hold(1, "127.0.0.1", false))),
        Ok(9000)
    );
    // The same id number in another process is another id.
    assert_eq!(
        port(b.bind_port(TCP, 9000, hold(1, "127.0.0.1", false))),
        Err(PortError::AddrInUse)
    );
    assert_eq!(
        port(b.bind_port(TCP, 9000, hold(2, "0.0.0.0", false))),
        Err(PortError::AddrNotAvail)
    );
    assert_eq!(
        port(b.bind_port(TCP, 9000, hold(2, "127.0.0.2", false))),
        Ok(9000)
    );
    // Reuse on both sides shares, until one listens.
    assert_eq!(
        port(a.bind_port(TCP, 9001, hold(3, "127.0.0.1", true))),
        Ok(9001)
    );
    assert_eq!(
        port(b.bind_port(TCP, 9001, hold(4, "127.0.0.1", true))),
        Ok(9001)
    );
    assert!(matches!(
        a.listen_port(TCP, 9001, 3),
        Err(HostError::Port(PortError::AddrInUse))
    ));
    assert_eq!(b.release_ports(4).unwrap(), 1);
    a.listen_port(TCP, 9001, 3).unwrap();
    assert_eq!(
        port(b.bind_port(TCP, 9001, hold(4, "127.0.0.1", true))),
        Err(PortError::AddrInUse)
    );
    assert!(matches!(
        a.listen_port(TCP, 9001, 99),
        Err(HostError::NotHeld)
    ));
    // Port 0: an ephemeral port nobody holds, and a second one differs.
    let e1 = port(a.bind_port(TCP, 0, hold(5, "127.0.0.1", false))).unwrap();
    let e2 = port(b.bind_port(TCP, 0, hold(6, "127.0.0.1", false))).unwrap();
    assert!(EPHEMERAL.contains(&e1) && EPHEMERAL.contains(&e2));
    assert_ne!(e1, e2);
    if !may_bind_low() {
        assert_eq!(
            port(a.bind_port(TCP, 80, hold(7, "127.0.0.1", false))),
            Err(PortError::Access)
        );
    }
    assert_eq!(a.held()[3], 3);
    drop(a);
    assert_eq!(
        port(b.bind_port(TCP, 9000, hold(8, "127.0.0.1", false))),
        Ok(9000)
    );
}

#[test]
fn a_forked_copy_updates_nothing_and_leaves_the_slot_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two(dir.path());
    a.claim_qpn(7).unwrap();
    // What a child forked after attach holds: the same open file, another
    // PID. Stand it in by changing the recorded one.
    let mut child = a;
    let parent_pid = child.pid;
    child.pid = parent_pid.wrapping_add(1);
    assert!(matches!(child.claim_qpn(8), Err(HostError::Forked)));
    assert!(matches!(child.release_qpn(7), Err(HostError::Forked)));
    assert_eq!(child.owner_of_qpn(7).map(|o| o.pid), Some(parent_pid));
    let s = child.slot();
    drop(child);
    // The parent's slot, entries and liveness lock are untouched...
    assert_eq!(b.owner_of_qpn(7).map(|o| o.slot), Some(s));
    // ... save that here the "parent" was the dropped value itself, whose
    // file is now closed: the slot is dead and reaped.
    assert!(b.reap(s).unwrap());
}

#[test]
fn the_last_process_to_leave_a_table_removes_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two(dir.path());
    let path = a.path().to_path_buf();
    let lookup = HostTable::open_in(dir.path(), ip("127.0.0.1"), 4791).unwrap();
    assert!(lookup.is_current());
    drop(a);
    assert!(path.exists(), "another process is still attached");
    b.claim_qpn(0x42).unwrap();
    drop(b);
    assert!(!path.exists(), "the last one removed it");
    assert!(!lookup.is_current(), "a lookup-only value sees it gone");
    assert_eq!(lookup.owner_of_qpn(0x42), None);
    // The next process starts a new table, empty; the old lookup-only
    // value is not it.
    let c = HostTable::attach_in(dir.path(), ip("127.0.0.1"), 4791, b"c").unwrap();
    assert!(path.exists());
    assert_eq!(c.slot(), 0);
    assert_eq!(c.owner_of_qpn(0x42), None);
    assert!(!lookup.is_current());
    assert!(HostTable::open_in(dir.path(), ip("127.0.0.1"), 4791)
        .unwrap()
        .is_current());
}

#[test]
fn an_attachment_to_a_file_removed_meanwhile_opens_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let a = HostTable::attach_in(dir.path(), ip("127.0.0.1"), 4791, b"a").unwrap();
    let path = a.path().to_path_buf();
    let uid = nix::unistd::geteuid().as_raw();
    // Opened, then its last process leaves before a slot is taken in it.
    let late = HostTable::open_path(&path, uid).unwrap();
    drop(a);
    assert!(!path.exists());
    assert!(!late.file.is_at(&path));
    let name = SlotName::new(b"b").unwrap();
    assert_eq!(
        late.take_slot(&name).unwrap(),
        None,
        "no slot in a removed file"
    );
    // attach_in then opens again: a new file, this one.
    let b = HostTable::attach_in(dir.path(), ip("127.0.0.1"), 4791, b"b").unwrap();
    assert!(b.is_current());
    assert!(path.exists());
}

#[test]
fn a_new_table_sweeps_away_the_files_of_killed_last_processes() {
    let dir = tempfile::tempdir().unwrap();
    // One table with a live process, and another user's name: kept.
    let live = HostTable::attach_in(dir.path(), ip("127.0.2.1"), 4791, b"live").unwrap();
    let other = dir.path().join("roce-host-4294967294-net1-127.0.0.1-4791");
    std::fs::write(&other, b"not ours").unwrap();
    // Three tables whose last process "was killed": its slot stays taken
    // but nobody holds its liveness lock, and its drop never runs. Each
    // new table sweeps the ones before it.
    let mut left = Vec::new();
    for k in 1..=3 {
        let t = HostTable::attach_in(dir.path(), ip(&format!("127.0.1.{k}")), 4791, b"x").unwrap();
        t.claim_qpn(0x77).unwrap();
        t.file.drop_byte(usize::from(t.slot())).unwrap();
        left.push(t.path().to_path_buf());
        std::mem::forget(t);
    }
    assert!(
        !left[0].exists() && !left[1].exists(),
        "swept by the next ones"
    );
    assert!(left[2].exists());
    let _n = HostTable::attach_in(dir.path(), ip("127.0.3.1"), 4791, b"new").unwrap();
    assert!(
        !left[2].exists(),
        "swept by the first process of a new table"
    );
    assert!(live.path().exists());
    assert!(other.exists());
    // A second process of an existing table does not sweep (only the
    // first of a new one does): cheap attaches.
    let t = HostTable::attach_in(dir.path(), ip("127.0.1.9"), 4791, b"x").unwrap();
    t.file.drop_byte(usize::from(t.slot())).unwrap();
    let kept = t.path().to_path_buf();
    std::mem::forget(t);
    let _m = HostTable::attach_in(dir.path(), ip("127.0.2.1"), 4791, b"second").unwrap();
    assert!(kept.exists());
}
