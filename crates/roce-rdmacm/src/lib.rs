//! `librdmacm.so.1` of the drop-in libraries: a stub. It defines
//! librdmacm's version nodes (`RDMACM_1.0` … `RDMACM_1.3`) and needs
//! this stack's `libibverbs.so.1`, which exports every `rdma_*@RDMACM_1.x`
//! function (crate `roce-rdmacm-impl`, linked into `roce-ibverbs`).
//!
//! A program linked against rdma-core's librdmacm asks the dynamic
//! linker for, say, `rdma_connect@RDMACM_1.0` and requires that
//! `librdmacm.so.1` defines the version `RDMACM_1.0`. This library
//! satisfies the second; the symbol itself is found in the next library
//! of the search scope that defines it with that version, ours
//! `libibverbs.so.1` (glibc matches versions by name, not by file: glibc
//! 2.34 moved libpthread's functions into libc the same way). So both
//! libraries share one implementation and one state: the `ibv_context`
//! an `rdma_cm_id` points to is a context of the same verbs library the
//! program calls. `docs/dropin.md` has the details.
//!
//! There is no code here: `build.rs` gives the library its SONAME,
//! its version nodes ([`VERSION_SCRIPT`]) and its dependency:
//!
//! ```
//! // Every version node of rdma-core v44's librdmacm, none with a symbol.
//! for node in ["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"] {
//!     assert!(rdmacm::VERSION_SCRIPT.contains(&format!("{node} {{")));
//! }
//! assert!(!rdmacm::VERSION_SCRIPT.contains("global"));
//! ```
//!
//! A program runs on it through `roce exec`, which puts both libraries
//! first on its `LD_LIBRARY_PATH`:
//!
//! ```text
//! roce exec -- rping -s -a 127.0.0.1 -v -C 3 &
//! roce exec -- rping -c -a 127.0.0.1 -v -C 3
//! ```
//!
//! `crates/roce-ibverbs/tests/rdmacm.rs` runs Debian's rdma_cm programs
//! over it; `readelf -d` and `objdump -p` on the built `librdmacm.so`
//! show the SONAME, the DT_NEEDED entry and the four version
//! definitions.

mod nodes;
pub use nodes::VERSION_SCRIPT;
