//! Links `librdmacm.so` as a stub `librdmacm.so.1`: SONAME, librdmacm's
//! version nodes (empty: the functions are in `libibverbs.so.1`) and a
//! DT_NEEDED entry for `libibverbs.so.1`, so that a program that loads
//! only librdmacm gets the implementation too. As for `roce-ibverbs`,
//! the link uses lld (rustc's own version script and ours are merged
//! only by it).
//!
//! The DT_NEEDED entry comes from linking against an empty shared object
//! named `libibverbs.so.1`, made here with the C compiler rustc links
//! with: the crate cannot depend on `roce-ibverbs` to link against the
//! real one, because cargo hands a dependency's cdylib link arguments
//! (roce-ibverbs' version script and symbol aliases) to a dependent
//! cdylib too.

use std::path::PathBuf;

// The script, shared with the crate's docs (`rdmacm::VERSION_SCRIPT`).
include!("src/nodes.rs");

fn main() {
    println!("cargo:rerun-if-changed=src/nodes.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let script = out.join("librdmacm.map");
    std::fs::write(&script, VERSION_SCRIPT).unwrap();
    let needed = out.join("libibverbs.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let made = std::process::Command::new(&cc)
        .args([
            "-shared",
            "-nostdlib",
            "-Wl,-soname,libibverbs.so.1",
            "-x",
            "c",
            "/dev/null",
            "-o",
        ])
        .arg(&needed)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        panic!("{cc} could not make the empty libibverbs.so.1 to link against");
    }
    if let Some(dir) = toolchain_lld() {
        println!("cargo:rustc-cdylib-link-arg=-B{}", dir.display());
    }
    println!("cargo:rustc-cdylib-link-arg=-fuse-ld=lld");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname=librdmacm.so.1");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        script.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg={}", needed.display());
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
