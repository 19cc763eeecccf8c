//! Tests of the declared modify-QP transition table (style rule 4: the table
//! is snapshot-tested so any change to it shows up in review).

use std::fmt::Write as _;

use proptest::prelude::*;
use roce_core::qp::state::{
    check_modify, check_modify_with_cur_state, transition, ModifyError, QpAttrMask as A, QpState,
    QpType, TRANSITIONS,
};
use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};

const S: A = A::STATE;

fn m(list: &[A]) -> A {
    list.iter().fold(A::empty(), |acc, &a| acc | a)
}

fn show(mask: A) -> String {
    if mask.is_empty() {
        "-".to_owned()
    } else {
        mask.to_string()
    }
}

fn render_table() -> String {
    let mut out = String::new();
    for t in TRANSITIONS {
        for ty in QpType::ALL {
            let head = format!("{:<5} -> {:<5} {}", t.from.name(), t.to.name(), ty.name());
            if t.is_valid_for(ty) {
                let (req, opt) = (show(t.required_for(ty)), show(t.optional_for(ty)));
                writeln!(out, "{head}  required: {req}  optional: {opt}").unwrap();
            } else {
                writeln!(out, "{head}  (not valid)").unwrap();
            }
        }
    }
    out
}

const EXPECTED_TABLE: &str = "\
RESET -> RESET RC  required: -  optional: -
RESET -> RESET UC  required: -  optional: -
RESET -> RESET UD  required: -  optional: -
RESET -> INIT  RC  required: ACCESS_FLAGS|PKEY_INDEX|PORT  optional: -
RESET -> INIT  UC  required: ACCESS_FLAGS|PKEY_INDEX|PORT  optional: -
RESET -> INIT  UD  required: PKEY_INDEX|PORT|QKEY  optional: -
RESET -> ERR   RC  required: -  optional: -
RESET -> ERR   UC  required: -  optional: -
RESET -> ERR   UD  required: -  optional: -
INIT  -> RESET RC  required: -  optional: -
INIT  -> RESET UC  required: -  optional: -
INIT  -> RESET UD  required: -  optional: -
INIT  -> INIT  RC  required: -  optional: ACCESS_FLAGS|PKEY_INDEX|PORT
INIT  -> INIT  UC  required: -  optional: ACCESS_FLAGS|PKEY_INDEX|PORT
INIT  -> INIT  UD  required: -  optional: PKEY_INDEX|PORT|QKEY
INIT  -> RTR   RC  required: AV|PATH_MTU|RQ_PSN|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|DEST_QPN  optional: ACCESS_FLAGS|PKEY_INDEX|ALT_PATH
INIT  -> RTR   UC  required: AV|PATH_MTU|RQ_PSN|DEST_QPN  optional: ACCESS_FLAGS|PKEY_INDEX|ALT_PATH
INIT  -> RTR   UD  required: -  optional: PKEY_INDEX|QKEY
INIT  -> ERR   RC  required: -  optional: -
INIT  -> ERR   UC  required: -  optional: -
INIT  -> ERR   UD  required: -  optional: -
RTR   -> RESET RC  required: -  optional: -
RTR   -> RESET UC  required: -  optional: -
RTR   -> RESET UD  required: -  optional: -
RTR   -> RTS   RC  required: TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|SQ_PSN  optional: CUR_STATE|ACCESS_FLAGS|ALT_PATH|MIN_RNR_TIMER|PATH_MIG_STATE
RTR   -> RTS   UC  required: SQ_PSN  optional: CUR_STATE|ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE
RTR   -> RTS   UD  required: SQ_PSN  optional: CUR_STATE|QKEY
RTR   -> ERR   RC  required: -  optional: -
RTR   -> ERR   UC  required: -  optional: -
RTR   -> ERR   UD  required: -  optional: -
RTS   -> RESET RC  required: -  optional: -
RTS   -> RESET UC  required: -  optional: -
RTS   -> RESET UD  required: -  optional: -
RTS   -> RTS   RC  required: -  optional: CUR_STATE|ACCESS_FLAGS|ALT_PATH|MIN_RNR_TIMER|PATH_MIG_STATE
RTS   -> RTS   UC  required: -  optional: CUR_STATE|ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE
RTS   -> RTS   UD  required: -  optional: CUR_STATE|QKEY
RTS   -> SQD   RC  required: -  optional: EN_SQD_ASYNC_NOTIFY
RTS   -> SQD   UC  required: -  optional: EN_SQD_ASYNC_NOTIFY
RTS   -> SQD   UD  required: -  optional: EN_SQD_ASYNC_NOTIFY
RTS   -> ERR   RC  required: -  optional: -
RTS   -> ERR   UC  required: -  optional: -
RTS   -> ERR   UD  required: -  optional: -
SQD   -> RESET RC  required: -  optional: -
SQD   -> RESET UC  required: -  optional: -
SQD   -> RESET UD  required: -  optional: -
SQD   -> RTS   RC  required: -  optional: CUR_STATE|ACCESS_FLAGS|ALT_PATH|MIN_RNR_TIMER|PATH_MIG_STATE
SQD   -> RTS   UC  required: -  optional: CUR_STATE|ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE
SQD   -> RTS   UD  required: -  optional: CUR_STATE|QKEY
SQD   -> SQD   RC  required: -  optional: ACCESS_FLAGS|PKEY_INDEX|PORT|AV|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|ALT_PATH|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|PATH_MIG_STATE
SQD   -> SQD   UC  required: -  optional: ACCESS_FLAGS|PKEY_INDEX|AV|ALT_PATH|PATH_MIG_STATE
SQD   -> SQD   UD  required: -  optional: PKEY_INDEX|QKEY
SQD   -> ERR   RC  required: -  optional: -
SQD   -> ERR   UC  required: -  optional: -
SQD   -> ERR   UD  required: -  optional: -
SQE   -> RESET RC  required: -  optional: -
SQE   -> RESET UC  required: -  optional: -
SQE   -> RESET UD  required: -  optional: -
SQE   -> RTS   RC  (not valid)
SQE   -> RTS   UC  required: -  optional: CUR_STATE|ACCESS_FLAGS
SQE   -> RTS   UD  required: -  optional: CUR_STATE|QKEY
SQE   -> ERR   RC  required: -  optional: -
SQE   -> ERR   UC  required: -  optional: -
SQE   -> ERR   UD  required: -  optional: -
ERR   -> RESET RC  required: -  optional: -
ERR   -> RESET UC  required: -  optional: -
ERR   -> RESET UD  required: -  optional: -
ERR   -> ERR   RC  required: -  optional: -
ERR   -> ERR   UC  required: -  optional: -
ERR   -> ERR   UD  required: -  optional: -
";

#[test]
fn table_snapshot() {
    let got = render_table();
    if got != EXPECTED_TABLE {
        panic!("transition table changed; new rendering:\n{got}");
    }
}

/// Independent statement of which (from, to) pairs are legal per type: the
/// kernel `qp_state_table` pairs plus RESET -> ERR, minus SQE -> RTS for RC.
fn legal(ty: QpType, from: QpState, to: QpState) -> bool {
    match (from, to) {
        (_, Reset | QpState::Err) => true,
        (Reset, Init) | (Init, Init | Rtr) | (Rtr, Rts) | (Rts, Rts | Sqd) | (Sqd, Rts | Sqd) => {
            true
        }
        (Sqe, Rts) => ty != QpType::Rc,
        _ => false,
    }
}

#[test]
fn table_is_sorted_unique_and_well_formed() {
    let key = |t: &roce_core::qp::state::Transition| (t.from.to_ibv(), t.to.to_ibv());
    for pair in TRANSITIONS.windows(2) {
        assert!(
            key(&pair[0]) < key(&pair[1]),
            "{:?} / {:?}",
            pair[0],
            pair[1]
        );
    }
    for t in TRANSITIONS {
        for ty in QpType::ALL {
            let (req, opt) = (t.required_for(ty), t.optional_for(ty));
            assert!((req & opt).is_empty(), "{t:?} {ty}");
            assert!(!(req | opt).contains(S), "{t:?} {ty}");
            assert!(!(req | opt).contains(A::CAP) && !(req | opt).contains(A::RATE_LIMIT));
            if !t.is_valid_for(ty) {
                assert!(req.is_empty() && opt.is_empty(), "{t:?} {ty}");
            }
        }
    }
}

fn path_masks(ty: QpType) -> [A; 3] {
    let init = match ty {
        QpType::Ud => m(&[A::PKEY_INDEX, A::PORT, A::QKEY]),
        _ => m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]),
    };
    let rtr_uc = m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN]);
    let rtr = match ty {
        QpType::Rc => rtr_uc | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER,
        QpType::Uc => rtr_uc,
        QpType::Ud => A::empty(),
    };
    let rts = match ty {
        QpType::Rc => m(&[
            A::SQ_PSN,
            A::TIMEOUT,
            A::RETRY_CNT,
            A::RNR_RETRY,
            A::MAX_QP_RD_ATOMIC,
        ]),
        _ => A::SQ_PSN,
    };
    [init, rtr, rts]
}

#[test]
fn full_bring_up_path_with_exactly_the_required_masks() {
    for ty in QpType::ALL {
        let [init, rtr, rts] = path_masks(ty);
        assert_eq!(check_modify(ty, Reset, S | init, Init), Ok(()), "{ty}");
        assert_eq!(check_modify(ty, Init, S | rtr, Rtr), Ok(()), "{ty}");
        assert_eq!(check_modify(ty, Rtr, S | rts, Rts), Ok(()), "{ty}");
        // The table says exactly this (docs/protocol.md §6 table).
        let req = |from, to| transition(ty, from, to).map(|t| t.required_for(ty));
        assert_eq!(req(Reset, Init), Some(init), "{ty}");
        assert_eq!(req(Init, Rtr), Some(rtr), "{ty}");
        assert_eq!(req(Rtr, Rts), Some(rts), "{ty}");
    }
}

#[test]
fn required_mask_is_state_plus_the_row_or_state_alone() {
    for ty in QpType::ALL {
        let [init, rtr, rts] = path_masks(ty);
        assert_eq!(A::required(ty, Reset, Init), S | init, "{ty}");
        assert_eq!(A::required(ty, Init, Rtr), S | rtr, "{ty}");
        assert_eq!(A::required(ty, Rtr, Rts), S | rts, "{ty}");
        // No row: STATE alone, and the modify is refused as illegal.
        assert_eq!(A::required(ty, Reset, Rts), S, "{ty}");
        assert!(matches!(
            check_modify(ty, Reset, A::required(ty, Reset, Rts), Rts),
            Err(ModifyError::IllegalTransition { .. })
        ));
    }
    // SQE exists for unreliable service only.
    assert_eq!(A::required(QpType::Rc, Sqe, Rts), S);
}

#[test]
fn removing_any_required_attribute_is_reported_by_name() {
    let mut checked = 0;
    for t in TRANSITIONS {
        for ty in QpType::ALL.into_iter().filter(|&ty| t.is_valid_for(ty)) {
            let req = t.required_for(ty);
            for (bit, name) in req.iter().zip(req.names()) {
                let mask = S | req.difference(bit);
                let want = ModifyError::MissingAttribute {
                    qp_type: ty,
                    transition: (t.from, t.to),
                    attr: name,
                };
                assert_eq!(check_modify(ty, t.from, mask, t.to), Err(want));
                checked += 1;
            }
        }
    }
    // RESET->INIT 3+3+3, INIT->RTR 6+4, RTR->RTS 5+1+1.
    assert_eq!(checked, 26);
}

#[test]
fn any_attribute_outside_the_row_is_reported_by_name() {
    // Every bit ibv_qp_attr_mask defines: 0..=20 and RATE_LIMIT.
    let known = A((1 << 21) - 1) | A::RATE_LIMIT;
    for t in TRANSITIONS {
        for ty in QpType::ALL.into_iter().filter(|&ty| t.is_valid_for(ty)) {
            let (req, opt) = (t.required_for(ty), t.optional_for(ty));
            let outside = known.difference(req | opt | S);
            for (bit, name) in outside.iter().zip(outside.names()) {
                let want = ModifyError::UnexpectedAttribute {
                    qp_type: ty,
                    transition: (t.from, t.to),
                    attr: name,
                };
                assert_eq!(check_modify(ty, t.from, S | req | bit, t.to), Err(want));
            }
            // Every optional attribute, alone or all together, is accepted.
            for bit in opt.iter() {
                assert_eq!(check_modify(ty, t.from, S | req | bit, t.to), Ok(()));
            }
            assert_eq!(check_modify(ty, t.from, S | req | opt, t.to), Ok(()));
        }
    }
}

#[test]
fn unexpected_attribute_examples() {
    let rc_init = S | A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS | A::QKEY;
    let err = check_modify(QpType::Rc, Reset, rc_init, Init).unwrap_err();
    assert_eq!(
        err,
        ModifyError::UnexpectedAttribute {
            qp_type: QpType::Rc,
            transition: (Reset, Init),
            attr: "QKEY"
        }
    );
    assert_eq!(
        err.to_string(),
        "RESET -> INIT on an RC QP does not accept QKEY"
    );
    let err = check_modify(QpType::Ud, Rts, S | A::PATH_MTU, Rts).unwrap_err();
    assert_eq!(
        err.to_string(),
        "RTS -> RTS on a UD QP does not accept PATH_MTU"
    );
    // Undefined bits are refused too, and named by position.
    let err = check_modify(QpType::Uc, Rts, S | A(1 << 30), QpState::Err).unwrap_err();
    assert_eq!(
        err.to_string(),
        "RTS -> ERR on a UC QP does not accept UNKNOWN_BIT_30"
    );
}

#[test]
fn every_state_pair_and_type_matches_the_table() {
    for ty in QpType::ALL {
        for from in QpState::ALL {
            for to in QpState::ALL {
                let row = transition(ty, from, to);
                assert_eq!(row.is_some(), legal(ty, from, to), "{ty} {from} -> {to}");
                let got = check_modify(
                    ty,
                    from,
                    S | row.map_or(A::empty(), |t| t.required_for(ty)),
                    to,
                );
                if row.is_some() {
                    assert_eq!(got, Ok(()), "{ty} {from} -> {to}");
                } else {
                    let want = ModifyError::IllegalTransition {
                        qp_type: ty,
                        from,
                        to,
                    };
                    assert_eq!(got, Err(want), "{ty} {from} -> {to}");
                    // Whatever the mask.
                    let all = check_modify(ty, from, A(u32::MAX), to);
                    assert!(matches!(all, Err(ModifyError::IllegalTransition { .. })));
                }
            }
        }
    }
    let rows: usize = QpType::ALL
        .iter()
        .map(|&ty| TRANSITIONS.iter().filter(|t| t.is_valid_for(ty)).count())
        .sum();
    assert_eq!(rows, 23 * 3 - 1);
}

#[test]
fn to_err_and_to_reset_from_every_state_with_state_only() {
    for ty in QpType::ALL {
        for from in QpState::ALL {
            for to in [Reset, QpState::Err] {
                assert_eq!(check_modify(ty, from, S, to), Ok(()), "{ty} {from} -> {to}");
                let extra = check_modify(ty, from, S | A::PORT, to);
                let want = ModifyError::UnexpectedAttribute {
                    qp_type: ty,
                    transition: (from, to),
                    attr: "PORT",
                };
                assert_eq!(extra, Err(want));
            }
        }
    }
}

#[test]
fn attribute_only_modify_targets_the_current_state() {
    // No STATE bit: `next` is ignored and the row is current -> current.
    let r = check_modify(QpType::Rc, Rts, A::MIN_RNR_TIMER, Reset);
    assert_eq!(r, Ok(()));
    let r = check_modify(QpType::Ud, Sqd, A::QKEY | A::PKEY_INDEX, Init);
    assert_eq!(r, Ok(()));
    let r = check_modify(QpType::Uc, Init, A::empty(), Rts);
    assert_eq!(r, Ok(()));
    for (ty, state) in [(QpType::Rc, Rtr), (QpType::Ud, Sqe), (QpType::Uc, Sqe)] {
        let r = check_modify(ty, state, A::ACCESS_FLAGS, Rts);
        let want = ModifyError::IllegalTransition {
            qp_type: ty,
            from: state,
            to: state,
        };
        assert_eq!(r, Err(want));
    }
    let r = check_modify(QpType::Rc, Rtr, A::empty(), Rts).unwrap_err();
    assert_eq!(
        r.to_string(),
        "RTR -> RTR is not a legal transition for an RC QP"
    );
}

#[test]
fn cur_state() {
    let rts_rts = S | A::CUR_STATE;
    assert_eq!(
        check_modify_with_cur_state(QpType::Rc, Rts, rts_rts, Rts, Rts),
        Ok(())
    );
    let err = check_modify_with_cur_state(QpType::Rc, Rts, rts_rts, Rts, Sqd).unwrap_err();
    assert_eq!(
        err,
        ModifyError::CurrentStateMismatch {
            given: Sqd,
            actual: Rts
        }
    );
    assert_eq!(err.to_string(), "CUR_STATE says SQD but the QP is in RTS");
    // The given value only counts when the CUR_STATE bit is set.
    assert_eq!(
        check_modify_with_cur_state(QpType::Rc, Rts, S, Rts, Sqd),
        Ok(())
    );
    // Accepted on RTR->RTS, RTS->RTS, SQD->RTS, SQE->RTS (UC/UD), nowhere else.
    for ty in QpType::ALL {
        for from in QpState::ALL {
            for to in QpState::ALL {
                let Some(t) = transition(ty, from, to) else {
                    continue;
                };
                let mask = S | t.required_for(ty) | A::CUR_STATE;
                let ok = check_modify_with_cur_state(ty, from, mask, to, from).is_ok();
                assert_eq!(ok, to == Rts, "{ty} {from} -> {to}");
            }
        }
    }
    let rtr = S | A::CUR_STATE | path_masks(QpType::Uc)[1];
    let err = check_modify(QpType::Uc, Init, rtr, Rtr).unwrap_err();
    assert_eq!(
        err.to_string(),
        "INIT -> RTR on a UC QP does not accept CUR_STATE"
    );
}

#[test]
fn missing_attribute_message() {
    let mask = S | A::AV | A::DEST_QPN | A::RQ_PSN | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER;
    let err = check_modify(QpType::Rc, Init, mask, Rtr).unwrap_err();
    assert_eq!(err.to_string(), "INIT -> RTR on an RC QP requires PATH_MTU");
    let _: &dyn std::error::Error = &err;
    let err = ModifyError::InvalidValue("path_mtu");
    assert_eq!(err.to_string(), "invalid value for path_mtu");
}

#[test]
fn mask_helpers() {
    let mask = A::PATH_MTU | A::STATE | A::RATE_LIMIT;
    assert_eq!(format!("{mask:?}"), "STATE|PATH_MTU|RATE_LIMIT");
    assert_eq!(format!("{:?}", A::empty()), "(empty)");
    assert_eq!(
        mask.names().collect::<Vec<_>>(),
        ["STATE", "PATH_MTU", "RATE_LIMIT"]
    );
    assert_eq!(
        mask.iter().collect::<Vec<_>>(),
        [A::STATE, A::PATH_MTU, A::RATE_LIMIT]
    );
    assert!(mask.contains(A::STATE | A::PATH_MTU) && !mask.contains(A::QKEY));
    assert_eq!(A(u32::MAX).iter().count(), 32);
    assert_eq!(A(1 << 21).to_string(), "UNKNOWN_BIT_21");
    assert_eq!(A::DEST_QPN.bits(), 1 << 20);
    let mut acc = A::empty();
    acc |= A::SQ_PSN;
    assert_eq!(acc, A(1 << 16));
}

#[test]
fn ibv_values() {
    for (i, s) in QpState::ALL.into_iter().enumerate() {
        assert_eq!(s.to_ibv() as usize, i);
        assert_eq!(QpState::from_ibv(s.to_ibv()), Some(s));
    }
    assert_eq!(QpState::from_ibv(7), None);
    assert_eq!(QpState::from_ibv(u32::MAX), None);
    for ty in QpType::ALL {
        assert_eq!(QpType::from_ibv(ty.to_ibv()), Some(ty));
    }
    assert_eq!(QpType::Rc.to_ibv(), 2);
    assert_eq!(QpType::from_ibv(1), None);
    assert_eq!(Sqe.name(), "SQE");
}

proptest! {
    /// No input panics, and an accepted request always satisfies its row.
    #[test]
    fn check_modify_never_panics(ty in 0usize..3, cur in 0u32..8, next in 0u32..8,
                                 given in 0u32..8, mask in any::<u32>()) {
        let ty = QpType::ALL[ty];
        let state = |v| QpState::from_ibv(v).unwrap_or(Reset);
        let (cur, next, given) = (state(cur), state(next), state(given));
        let mask = A(mask);
        if check_modify_with_cur_state(ty, cur, mask, next, given).is_ok() {
            let to = if mask.contains(S) { next } else { cur };
            let t = transition(ty, cur, to).expect("accepted means a row exists");
            prop_assert!(mask.contains(t.required_for(ty)));
            prop_assert!((t.required_for(ty) | t.optional_for(ty) | S).contains(mask));
        }
        let _ = check_modify(ty, cur, mask, next).map_err(|e| e.to_string());
    }
}
