//! `MemoryRegion::rereg` / `rereg_raw` (`ibv_rereg_mr`): the keys stay,
//! and the peer's next access meets the new memory, PD and rights.

mod common;

use common::*;
use roce_verbs::*;

/// A peer's RDMA WRITE of `data` into `(addr, rkey)`, and its status.
fn write(a: &Side, data: &MemoryRegion, addr: u64, rkey: Rkey) -> WcStatus {
    a.qp.post_send(SendWr::write(
        7,
        [data.sge_all()],
        RemoteAddr::new(addr, rkey),
    ))
    .unwrap();
    one(&a.cq).wc.status
}

#[test]
fn a_write_lands_in_the_new_memory_under_the_same_keys() {
    let (a, b) = pair(QpType::Rc);
    let src = a.pd.reg_mr(pattern(4096, 9), Access::NONE).unwrap();
    let mut old = vec![0u8; 4096];
    let mut new = vec![0u8; 8192];
    // SAFETY: both vectors outlive the region (dropped below first) and
    // are read only after the completions that wrote them were polled.
    let mut mr = unsafe { b.pd.reg_mr_raw(old.as_mut_ptr(), old.len(), ALL) }.unwrap();
    let (lkey, rkey) = (mr.lkey(), mr.rkey());
    // SAFETY: as above.
    unsafe { mr.rereg_raw(new.as_mut_ptr(), new.len(), new.as_ptr() as u64, None, None) }.unwrap();
    assert_eq!((mr.lkey(), mr.rkey()), (lkey, rkey));
    assert_eq!((mr.addr(), mr.len()), (new.as_ptr() as u64, 8192));
    // The second half of the new region: beyond the old one's length.
    let at = mr.addr() + 4096;
    assert_eq!(write(&a, &src, at, rkey), WcStatus::Success);
    // The old range is not the region any more.
    let gone = write(&a, &src, old.as_ptr() as u64, rkey);
    assert_eq!(gone, WcStatus::RemAccessErr);
    drop(mr);
    assert_eq!(&new[4096..], &pattern(4096, 9)[..]);
    assert!(old.iter().all(|&b| b == 0));
}

#[test]
fn new_rights_and_pd_apply_to_the_next_access() {
    let (a, b) = pair(QpType::Rc);
    let src = a.pd.reg_mr(pattern(64, 1), Access::NONE).unwrap();
    let mut mr = b.pd.reg_mr(vec![0u8; 64], ALL).unwrap();
    let r = mr.remote();
    mr.rereg(None, Some(Access::LOCAL_WRITE | Access::REMOTE_READ))
        .unwrap();
    assert_eq!(mr.access(), Access::LOCAL_WRITE | Access::REMOTE_READ);
    assert_eq!(write(&a, &src, r.addr, r.rkey), WcStatus::RemAccessErr);
    // The error put the QP in ERR: a new pair for the next access.
    let (a, b) = pair(QpType::Rc);
    let src = a.pd.reg_mr(pattern(64, 2), Access::NONE).unwrap();
    let mut mr = b.pd.reg_mr(vec![0u8; 64], ALL).unwrap();
    let r = mr.remote();
    let other = b.ctx.alloc_pd();
    mr.rereg(Some(&other), None).unwrap();
    assert_eq!(mr.pd(), &other);
    // The QP is of the first PD: the region is out of its reach now.
    assert_eq!(write(&a, &src, r.addr, r.rkey), WcStatus::RemAccessErr);
    // Invalid rights and a PD of another context change nothing.
    let bad = mr.rereg(None, Some(Access::REMOTE_WRITE)).unwrap_err();
    assert!(matches!(bad, RegMrError::InvalidAccess), "{bad:?}");
    let foreign = a.ctx.alloc_pd();
    assert_eq!(
        mr.rereg(Some(&foreign), None).unwrap_err(),
        RegMrError::WrongContext
    );
    assert_eq!(mr.pd(), &other);
    assert_eq!(mr.access(), ALL);
    // An owned region keeps its buffer.
    let mut spare = [0u8; 8];
    // SAFETY: refused before the memory is registered.
    let e = unsafe { mr.rereg_raw(spare.as_mut_ptr(), 8, 0, None, None) }.unwrap_err();
    assert!(matches!(e, RegMrError::InvalidArgument(_)), "{e:?}");
}

#[test]
fn a_resized_cq_holds_more_and_refuses_to_shrink_below_what_waits() {
    let (a, b) = pair(QpType::Rc);
    let cq = a.ctx.create_cq(2, None).unwrap();
    let (qa, _qb) = rc_pair_on(&a, &b, &cq);
    cq.resize(4).unwrap();
    let src = a.pd.reg_mr(pattern(16, 3), Access::NONE).unwrap();
    let dst = b.pd.reg_mr(vec![0u8; 16], ALL).unwrap();
    let r = dst.remote();
    for i in 0..4 {
        qa.post_send(SendWr::write(i, [src.sge_all()], r.at(0)))
            .unwrap();
    }
    // The progress thread takes the ACKs without anyone polling: four
    // completions in a CQ created for two, once they are all in.
    let end = std::time::Instant::now() + WAIT;
    while qa.counters().rx_packets == 0 && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(cq.resize(3), Err(CqError::BelowWaiting));
    let got = cq.poll_until(4, WAIT).unwrap();
    assert_eq!(got.iter().filter(|c| c.is_success()).count(), 4);
    cq.resize(1).unwrap();
    assert_eq!(cq.resize(0), Err(CqError::SizeOutOfRange));
    assert_eq!(cq.resize((1 << 22) + 1), Err(CqError::SizeOutOfRange));
}
