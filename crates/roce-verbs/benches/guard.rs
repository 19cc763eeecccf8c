//! What the guard over program memory costs (issue 33): the guarded copy
//! next to `ptr::copy` and to the kernel's copy (`process_vm_writev`) at
//! the sizes the engine moves (a small payload, a 1 KiB and a 4 KiB
//! packet, 64 KiB), and the registration check (`check_pages`, reading
//! `/proc/self/maps`) with the process's own mappings and with 1,000 and
//! 10,000 more below the range. Run:
//! `cargo bench -p roce-verbs --bench guard`.
#![allow(unsafe_code)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use roce_verbs::guard;

fn copies(c: &mut Criterion) {
    guard::install_fault_handler().unwrap();
    let mut g = c.benchmark_group("copy");
    for len in [64usize, 1024, 4096, 65536] {
        let src = vec![0x5au8; len];
        let mut dst = vec![0u8; len];
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("ptr_copy", len), &len, |b, &n| {
            b.iter(|| {
                // SAFETY: two buffers of ours of `n` bytes.
                unsafe { std::ptr::copy(black_box(src.as_ptr()), dst.as_mut_ptr(), n) }
            })
        });
        g.bench_with_input(BenchmarkId::new("guarded", len), &len, |b, &n| {
            b.iter(|| {
                // SAFETY: as above.
                unsafe { guard::copy(black_box(src.as_ptr()), dst.as_mut_ptr(), n) }
            })
        });
        g.bench_with_input(BenchmarkId::new("kernel", len), &len, |b, &n| {
            b.iter(|| {
                // SAFETY: as above.
                unsafe { guard::copy_by_kernel(black_box(src.as_ptr()), dst.as_mut_ptr(), n) }
            })
        });
    }
    g.finish();
}

/// `n` single-page mappings that the kernel cannot merge (alternating
/// rights), kept until the end of the process.
fn many_mappings(n: usize) {
    for i in 0..n {
        let prot = if i % 2 == 0 {
            libc::PROT_READ
        } else {
            libc::PROT_READ | libc::PROT_WRITE
        };
        // SAFETY: a fresh anonymous mapping, never used.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
    }
}

fn registration_check(c: &mut Criterion) {
    let mut g = c.benchmark_group("check_pages");
    // A buffer on the stack: the highest mappings, so every line of
    // /proc/self/maps is read before it (the worst case).
    let stack = [0u8; 4096];
    let mut added = 0;
    for extra in [0usize, 1000, 10000] {
        many_mappings(extra - added);
        added = extra;
        g.bench_with_input(BenchmarkId::new("stack_4k", extra), &extra, |b, _| {
            b.iter(|| guard::check_pages(black_box(stack.as_ptr() as usize), 4096, true))
        });
    }
    g.finish();
}

criterion_group!(benches, copies, registration_check);
criterion_main!(benches);
