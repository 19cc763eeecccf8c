//! MPI under `roce exec`: `tests/mpi/mpi_check.c` (ping-pong latency and
//! bandwidth over sizes in OSU's form, an `MPI_Allreduce` of 8 MiB of
//! doubles and an `MPI_Alltoall` of 1 MiB blocks, results checked),
//! built with Debian's `mpicc.openmpi` and `mpicc.mpich` and run with
//! Open MPI 4.1 (`--mca pml ucx`) and MPICH 4.0 (ch4:ucx), UCX forced to
//! the verbs transports (`UCX_TLS=rc_verbs,ud_verbs`; MPICH's own shared
//! memory off with `MPIR_CVAR_NOLOCAL=1`), 2 and 4 ranks on loopback and
//! 2 + 2 ranks in two network namespaces (root only; skipped otherwise).
//! docs/dropin.md "MPI".
//!
//! `roce exec` wraps the launcher (`mpirun`, `mpiexec`): the ranks are
//! its children, so they inherit the library path and the mount
//! namespace with the device files. Between namespaces the launcher
//! runs in the first and starts the second's daemon through a "remote
//! shell" script that runs `ip netns exec NS roce exec -- ...` instead of
//! ssh. Every rank of a host opens the device on the same address, the
//! one of its veth (127.0.0.1 on loopback), as a user runs them: the
//! ranks' `ROCE_LOG=1` lines, tagged with the rank by the launcher
//! (`--tag-output`, `-prepend-rank`), say where each opened.
//!
//! Every run is bounded and ended through its process group. `.ci/run`
//! installs the MPI packages and sets `ROCE_REQUIRE_MPI`, so in CI a
//! missing program fails the test; elsewhere it is skipped.

mod common;

use roce_testkit::netns::VethPair;
use roce_testkit::Group;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{lib_dir, roce};

/// Longest one MPI job may take.
const LIMIT: Duration = Duration::from_secs(120);
/// `mpi_check`'s arguments: largest ping-pong message, round trips per
/// size, `MPI_Allreduce` bytes, `MPI_Alltoall` bytes per rank pair.
/// Small messages and few round trips keep a run to a few seconds.
const ARGS: [&str; 4] = ["65536", "20", "8388608", "1048576"];
/// The UCX transports: verbs only (no shared memory, no TCP).
const TLS: &str = "rc_verbs,ud_verbs";

/// An MPI implementation: its compiler wrapper and launcher.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mpi {
    OpenMpi,
    Mpich,
}

impl Mpi {
    fn cc(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "mpicc.openmpi",
            Mpi::Mpich => "mpicc.mpich",
        }
    }

    /// Its `mpi.h` (Debian's `libopenmpi-dev`, `libmpich-dev`).
    fn header(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h",
            Mpi::Mpich => "/usr/include/x86_64-linux-gnu/mpich/mpi.h",
        }
    }

    fn launcher(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "mpirun.openmpi",
            Mpi::Mpich => "mpiexec.mpich",
        }
    }

    /// The launcher's arguments before the program, for `ranks` ranks
    /// (`hosts`: between namespaces, the hosts file or list and the
    /// remote shell script). Each line of a rank's output comes tagged
    /// with its rank ([`untag`]).
    fn launch(self, ranks: usize, hosts: Option<(&str, &Path)>) -> Vec<String> {
        let n = ranks.to_string();
        let mut a: Vec<String> = match self {
            // pml ucx only (it fails rather than fall back to ob1);
            // the self BTL only, which pml ucx does not use.
            Mpi::OpenMpi => [
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
                "-np",
                &n,
                "--mca",
                "pml",
                "ucx",
                "--mca",
                "btl",
                "self",
                "--mca",
                "osc",
                "ucx",
                "-x",
                "UCX_TLS",
                "-x",
                "ROCE_LOG",
                "--tag-output",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            Mpi::Mpich => vec!["-n".into(), n, "-prepend-rank".into()],
        };
        if let Some((hosts, agent)) = hosts {
            let agent = agent.to_string_lossy().into_owned();
            match self {
                Mpi::OpenMpi => a.extend([
                    // Ranks 0 and 1 (the ping-pong) on different hosts.
                    "--map-by".into(),
                    "node".into(),
                    "--hostfile".into(),
                    hosts.into(),
                    "--mca".into(),
                    "plm_rsh_agent".into(),
                    agent,
                    // The daemons' and ranks' out-of-band TCP on the veth.
                    "--mca".into(),
                    "oob_tcp_if_include".into(),
                    "10.0.0.0/8".into(),
                ]),
                // Ranks go round the hosts (`HOST:1` each), so 0 and 1
                // are on different hosts. Only these variables are
                // passed on: the ranks of the second namespace keep
                // their `roce exec`'s `ROCE_DEVICES`.
                Mpi::Mpich => a.extend([
                    "-genvlist".into(),
                    "UCX_TLS,MPIR_CVAR_NOLOCAL,ROCE_LOG".into(),
                    "-hosts".into(),
                    hosts.into(),
                    "-launcher".into(),
                    "ssh".into(),
                    "-launcher-exec".into(),
                    agent,
                ]),
            }
        }
        a
    }
}

/// Whether `prog` is on PATH.
fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// Whether `mpi`'s compiler, header and launcher are installed; a missing one
/// fails the test in CI.
fn have(mpi: Mpi) -> bool {
    let found = on_path(mpi.cc())
        && on_path(mpi.launcher())
        && Path::new(mpi.header()).is_file()
        && on_path("ucx_info");
    if !found {
        assert!(
            std::env::var_os("ROCE_REQUIRE_MPI").is_none(),
            "{}, {} or {} is not installed (apt-get install openmpi-bin libopenmpi-dev \
             mpich libmpich-dev ucx-utils)",
            mpi.cc(),
            mpi.header(),
            mpi.launcher()
        );
        eprintln!(
            "skipped: {}, {} or {} is not installed (apt-get install openmpi-bin \
             libopenmpi-dev mpich libmpich-dev ucx-utils)",
            mpi.cc(),
            mpi.header(),
            mpi.launcher()
        );
    }
    found
}

/// `mpi_check` built with `mpi`'s compiler wrapper in `dir` (each test
/// has a directory of its own, removed when it ends).
fn program(mpi: Mpi, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/mpi_check.c");
    let out = dir.join("mpi_check");
    let o = Command::new(mpi.cc())
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", mpi.cc()));
    assert!(o.status.success(), "{} failed:\n{}", mpi.cc(), text(&o));
    out
}

/// A directory of the test's own, removed when dropped.
fn work_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("roce-mpi")
        .tempdir()
        .unwrap()
}

/// The environment of every run: the library, saying where each
/// context opened (`ROCE_LOG`), UCX's settings cleared but `UCX_TLS`,
/// MPICH's shared memory off.
fn environment(c: &mut Command) {
    c.env("ROCE_LIB_DIR", lib_dir())
        .env("ROCE_LOG", "1")
        .env_remove("ROCE_ADDR")
        .env_remove("ROCE_ACK_DELAY");
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("UCX_") || k.starts_with("OMPI_") || k.starts_with("MPIR_") {
            c.env_remove(&*k);
        }
    }
    c.env("UCX_TLS", TLS)
        .env("MPIR_CVAR_NOLOCAL", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `out` without the launcher's rank tags (Open MPI's `[JOB,RANK]<stdout>:`,
/// MPICH's `[RANK] `), and each tagged line with its rank.
fn untag(out: &str) -> (String, Vec<(usize, &str)>) {
    let mut plain = String::new();
    let mut tagged = Vec::new();
    for l in out.lines() {
        let split = l.strip_prefix('[').and_then(|r| {
            let (tag, rest) = r.split_once(']')?;
            let rank = tag.rsplit(',').next()?.parse().ok()?;
            let rest = match rest.strip_prefix('<') {
                Some(r) => r.split_once(">:")?.1,
                None => rest.strip_prefix(' ').unwrap_or(rest),
            };
            Some((rank, rest))
        });
        let line = match split {
            Some((rank, rest)) => {
                tagged.push((rank, rest));
                rest
            }
            None => l,
        };
        plain.push_str(line);
        plain.push('\n');
    }
    (plain, tagged)
}

/// Asserts that each rank `r` of `ranks` said (`ROCE_LOG`) it opened a
/// device, every time `where_(r)` (`DEVICE opened on ADDRESS`) and nothing
/// else.
fn opened_on(out: &str, ranks: usize, where_: impl Fn(usize) -> String) {
    let (_, tagged) = untag(out);
    for r in 0..ranks {
        let opened: Vec<&str> = tagged
            .iter()
            .filter(|(rank, l)| *rank == r && l.contains(" opened on "))
            .map(|(_, l)| *l)
            .collect();
        let want = format!("libibverbs (roce): {}", where_(r));
        assert!(
            !opened.is_empty() && opened.iter().all(|l| *l == want),
            "rank {r}: {opened:?}, not {want:?} alone\n{out}"
        );
    }
}

/// The `SIZE VALUE` lines under the header line ending in `header`.
fn figures(out: &str, header: &str) -> Vec<(u64, f64)> {
    out.lines()
        .skip_while(|l| !l.trim_end().ends_with(header))
        .skip(1)
        .map_while(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

/// Runs `cmd` (a launcher under `roce exec`), bounded; it must exit 0
/// with every check passed and every figure printed. One job at a time
/// (two cores). Returns the output, tags and all.
fn job(cmd: Command, what: &str) -> String {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let started = Instant::now();
    let (o, late) = Group::spawn(cmd).wait(started + LIMIT);
    let tagged = text(&o);
    assert!(
        o.status.success() && !late,
        "{what}: {} (timed out: {late})\n{tagged}",
        o.status
    );
    let (t, _) = untag(&tagged);
    assert!(t.contains("all checks passed"), "{what}:\n{t}");
    let lat = figures(&t, "Latency (us)");
    let bw = figures(&t, "Bandwidth (MB/s)");
    let max: u64 = ARGS[0].parse().unwrap();
    let sizes: Vec<u64> = std::iter::successors(Some(1u64), |s| Some(s * 2))
        .take_while(|s| *s <= max)
        .collect();
    for (name, f) in [("latency", &lat), ("bandwidth", &bw)] {
        assert_eq!(
            f.iter().map(|x| x.0).collect::<Vec<_>>(),
            sizes,
            "{what}: {name}\n{t}"
        );
        // Two decimals, as OSU's: a few bytes a window between
        // namespaces may print 0.00 MB/s.
        assert!(
            f.iter()
                .all(|x| x.1 > 0.0 || (name == "bandwidth" && x.0 < 1024 && x.1 == 0.0)),
            "{what}: {name}\n{t}"
        );
    }
    let line = |f: &[(u64, f64)], size: u64| f.iter().find(|x| x.0 == size).map_or(0.0, |x| x.1);
    eprintln!(
        "{what}: {:.1} s; latency 1 B {:.2} us, 64 KiB {:.2} us; bandwidth 64 KiB {:.2} MB/s; {}; {}",
        started.elapsed().as_secs_f64(),
        line(&lat, 1),
        line(&lat, max),
        line(&bw, max),
        t.lines().find(|l| l.contains("MPI_Allreduce")).unwrap_or(""),
        t.lines().find(|l| l.contains("MPI_Alltoall")).unwrap_or(""),
    );
    tagged
}

/// `ranks` ranks of `mpi_check` on loopback, the launcher under `roce
/// exec --devices lo`: every rank on 127.0.0.1.
fn loopback(mpi: Mpi, ranks: usize) {
    if !have(mpi) {
        return;
    }
    let dir = work_dir();
    let prog = program(mpi, dir.path());
    let mut c = roce();
    c.args(["exec", "--devices", "lo", "--", mpi.launcher()])
        .args(mpi.launch(ranks, None))
        .arg(&prog)
        .args(ARGS);
    environment(&mut c);
    let out = job(c, &format!("{mpi:?} {ranks} ranks on loopback"));
    opened_on(&out, ranks, |_| "roce_lo opened on 127.0.0.1".into());
}

#[test]
fn open_mpi_2_ranks_on_loopback() {
    loopback(Mpi::OpenMpi, 2);
}

#[test]
fn open_mpi_4_ranks_on_loopback() {
    loopback(Mpi::OpenMpi, 4);
}

#[test]
fn mpich_2_ranks_on_loopback() {
    loopback(Mpi::Mpich, 2);
}

#[test]
fn mpich_4_ranks_on_loopback() {
    loopback(Mpi::Mpich, 4);
}

/// Writes an executable shell script.
fn script(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// 2 + 2 ranks of `mpi_check`: the launcher in namespace `a` under `roce
/// exec --devices VA`, the second host's daemon (Open MPI's `orted`,
/// MPICH's `hydra_pmi_proxy`) started by a remote shell script as `ip
/// netns exec B roce exec --devices VB -- sh -c CMD`; each namespace has
/// one address, which both its ranks open the device on.
fn across(mpi: Mpi) {
    if !have(mpi) {
        return;
    }
    let lab = match VethPair::new("mp", 96, 1) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let dir = work_dir();
    let prog = program(mpi, dir.path());
    let dir = dir.path();
    let roce_bin = roce().get_program().to_string_lossy().into_owned();
    let agent = dir.join("rsh");
    // ssh's options (hydra passes -x) are skipped; the command is one
    // line for a shell, as ssh would give it to the remote one.
    script(
        &agent,
        &format!(
            "#!/bin/sh\n\
             while [ \"${{1#-}}\" != \"$1\" ]; do shift; done\n\
             host=$1; shift\n\
             case $host in\n\
             {ip_a}) ns={a} dev={va};;\n\
             {ip_b}) ns={b} dev={vb};;\n\
             *) echo \"remote shell: unknown host $host\" >&2; exit 1;;\n\
             esac\n\
             exec ip netns exec $ns {roce_bin} exec --devices $dev -- sh -c \"$*\"\n",
            ip_a = lab.ip_a,
            ip_b = lab.ip_b,
            a = lab.a,
            b = lab.b,
            va = lab.va,
            vb = lab.vb,
        ),
    );
    let hosts = match mpi {
        Mpi::OpenMpi => {
            let f = dir.join("hosts");
            std::fs::write(&f, format!("{} slots=2\n{} slots=2\n", lab.ip_a, lab.ip_b)).unwrap();
            f.to_string_lossy().into_owned()
        }
        Mpi::Mpich => format!("{}:1,{}:1", lab.ip_a, lab.ip_b),
    };
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &lab.a, &roce_bin])
        .args(["exec", "--devices", &lab.va, "--", mpi.launcher()])
        .args(mpi.launch(4, Some((&hosts, &agent))))
        .arg(&prog)
        .args(ARGS);
    environment(&mut c);
    let out = job(c, &format!("{mpi:?} 2 + 2 ranks between namespaces"));
    // Ranks 0 and 2 in `a`, 1 and 3 in `b` (0 and 1, the ping-pong, in
    // different namespaces), both ranks of a namespace on its address.
    opened_on(&out, 4, |r| {
        if r % 2 == 0 {
            format!("roce_{} opened on {}", lab.va, lab.ip_a)
        } else {
            format!("roce_{} opened on {}", lab.vb, lab.ip_b)
        }
    });
}

#[test]
fn open_mpi_2_plus_2_ranks_between_namespaces() {
    across(Mpi::OpenMpi);
}

#[test]
fn mpich_2_plus_2_ranks_between_namespaces() {
    across(Mpi::Mpich);
}
