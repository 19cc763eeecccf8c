//! Links `libibverbs.so` as rdma-core's `libibverbs.so.1`: its SONAME
//! and a version script made from `symbols.txt`, which puts each
//! exported name in its rdma-core version node.
//!
//! rustc passes a version script of its own for every cdylib (exporting
//! the crate's `#[no_mangle]`/`#[export_name]` items, unversioned), and
//! GNU ld takes only one, so the library links with lld, which merges
//! them: the `rust-lld` every rustup toolchain ships (through its
//! `gcc-ld/ld.lld` wrapper), or a system `ld.lld` when the toolchain has
//! none, so nothing needs installing. The crate's functions are named `roce_abi_<name>` in the object
//! files; `--defsym=<name>=roce_abi_<name>` makes the C name, which only
//! our script versions.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=symbols.txt");
    let list = std::fs::read_to_string("symbols.txt").expect("symbols.txt");
    let mut nodes: Vec<(String, Vec<String>)> = Vec::new();
    let mut defsyms = Vec::new();
    for line in list.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.split_whitespace();
        let (Some(node), Some(name), Some(kind)) = (f.next(), f.next(), f.next()) else {
            panic!("symbols.txt: bad line {line:?}");
        };
        let target = match kind {
            "fn" | "data" => format!("roce_abi_{name}"),
            "stub" => "roce_abi_unsupported".to_string(),
            "enosys" => "roce_abi_enosys".to_string(),
            _ => panic!("symbols.txt: unknown kind in {line:?}"),
        };
        defsyms.push(format!("{name}={target}"));
        match nodes.iter_mut().find(|(n, _)| n == node) {
            Some((_, v)) => v.push(name.to_string()),
            None => nodes.push((node.to_string(), vec![name.to_string()])),
        }
    }
    let mut script = String::new();
    let mut prev: Option<String> = None;
    for (node, names) in &nodes {
        let _ = writeln!(script, "{node} {{\n  global:");
        for n in names {
            let _ = writeln!(script, "    {n};");
        }
        // Each library's nodes inherit its previous one (IBVERBS_1.1
        // from IBVERBS_1.0, RDMACM_1.1 from RDMACM_1.0); the private node
        // stands alone, as in rdma-core's maps.
        let family = node.rsplit_once('_').map_or(node.as_str(), |(f, _)| f);
        match &prev {
            Some(p) if !node.contains("PRIVATE") && p.starts_with(&format!("{family}_")) => {
                let _ = writeln!(script, "}} {p};");
            }
            _ => script.push_str("};\n"),
        }
        if !node.contains("PRIVATE") {
            prev = Some(node.clone());
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("libibverbs.map");
    std::fs::write(&out, script).unwrap();
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        if let Some(dir) = toolchain_lld() {
            println!("cargo:rustc-cdylib-link-arg=-B{}", dir.display());
        }
        println!("cargo:rustc-cdylib-link-arg=-fuse-ld=lld");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname=libibverbs.so.1");
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
            out.display()
        );
        for d in defsyms {
            println!("cargo:rustc-cdylib-link-arg=-Wl,--defsym={d}");
        }
    }
}

/// The toolchain's `gcc-ld` directory (holding an `ld.lld` that runs
/// `rust-lld`), if it has one.
fn toolchain_lld() -> Option<PathBuf> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    let host = std::env::var("HOST").ok()?;
    let dir = sysroot.join("lib/rustlib").join(host).join("bin/gcc-ld");
    dir.join("ld.lld").is_file().then_some(dir)
}
