//! The C programs in capi/c/, compiled with the system C compiler against include/herdless.h
//! and the libherdless_c.so this `cargo test` just built, then run: the POLLONE four-call
//! order, revents as poll() gives them and registrations that follow the array, bad input,
//! seed 003's herd (threads on a pipe, forked processes on a POSIX message queue), the first
//! program of docs/c.md, the flag bits against <poll.h>, a named group removed while in use,
//! and what an event carries (the caller's data, hang-ups and errors); and the call with no
//! setup, herdless_poll_shared: the seed's four calls verbatim but for the name, 32 unrelated
//! servers started by a shell with setsid on one POSIX queue, and poll()'s promises. Each runs on both
//! backends where the backend matters (herdless_poll_shared's through HERDLESS_BACKEND).
//!
//! The library is found beside this test's executable (cargo builds the crate's cdylib into
//! the same `deps` directory). Without a C compiler (`$CC`, else `cc`) the tests say so and
//! are skipped; `.ci/run` installs one.

#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

/// The directory holding libherdless_c.so (and .a) of this build.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let deps = exe
        .parent()
        .expect("the test lives in a directory")
        .to_path_buf();
    for dir in [
        deps.clone(),
        deps.parent().map(Path::to_path_buf).unwrap_or_default(),
    ] {
        if dir.join("libherdless_c.so").exists() {
            return dir;
        }
    }
    panic!(
        "libherdless_c.so is not beside {} (cargo builds the cdylib with the tests)",
        exe.display()
    );
}

/// The C compiler, or None (said loudly) if there is none.
fn compiler() -> Option<&'static str> {
    static CC: OnceLock<Option<String>> = OnceLock::new();
    CC.get_or_init(|| {
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        match Command::new(&cc).arg("--version").output() {
            Ok(out) if out.status.success() => Some(cc),
            _ => {
                eprintln!("SKIPPED: no C compiler ({cc}) here: the C programs cannot be built");
                None
            }
        }
    })
    .as_deref()
}

/// Compiles capi/c/<name>.c into the test's scratch directory, once per program (tests run
/// in parallel); None if there is no compiler.
fn build(name: &str) -> Option<PathBuf> {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| n == name) {
        return Some(exe.clone());
    }
    let exe = compile(name)?;
    built.push((name.to_string(), exe.clone()));
    Some(exe)
}

fn compile(name: &str) -> Option<PathBuf> {
    let cc = compiler()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c-programs");
    std::fs::create_dir_all(&out_dir).expect("the scratch directory can be made");
    let exe = out_dir.join(name);
    let lib = lib_dir();
    let out = Command::new(cc)
        .args([
            "-std=c11",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-D_GNU_SOURCE",
            "-I",
        ])
        .arg(root.join("../include"))
        .arg(root.join("c").join(format!("{name}.c")))
        .arg("-L")
        .arg(&lib)
        .args(["-lherdless_c", "-lpthread", "-lrt"])
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("the C compiler runs");
    assert!(
        out.status.success(),
        "compiling {name}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

/// Runs a built program; panics with its output unless it exits 0.
fn run(exe: &Path, args: &[&str]) -> String {
    // The library the program was linked against, first: cargo's LD_LIBRARY_PATH, which
    // outranks the program's run path, may name a directory with an older build of it.
    let out: Output = Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .output()
        .expect("the program runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    assert!(
        out.status.success(),
        "{} {args:?} exited with {}:\n{stdout}\n{}",
        exe.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn pollone_order(backend: &str) {
    let Some(exe) = build("pollone") else { return };
    let out = run(&exe, &[backend]);
    assert!(out.contains(&format!("POLLONE order held on the {backend} backend")));
}

#[test]
fn pollone_four_calls_serve_fd1_fd2_fd3_fd1_native() {
    pollone_order("native");
}

#[test]
fn pollone_four_calls_serve_fd1_fd2_fd3_fd1_emulated() {
    pollone_order("emulated");
}

fn bad_input(backend: &str) {
    let Some(exe) = build("bad_input") else {
        return;
    };
    let out = run(&exe, &[backend]);
    assert!(out.contains("0 case(s) failed"), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
}

#[test]
fn bad_input_from_c_gets_codes_native() {
    bad_input("native");
}

#[test]
fn bad_input_from_c_gets_codes_emulated() {
    bad_input("emulated");
}

/// Runs the C herd and checks that every message was read exactly once.
fn herd(args: &[&str]) {
    let Some(exe) = build("herd") else { return };
    let out = run(&exe, args);
    let result = out
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .expect("the herd prints a RESULT line");
    let field = |name: &str| {
        result
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} in {result}"))
            .to_string()
    };
    assert_eq!(field("read"), field("messages"), "every message read once");
}

#[test]
fn c_herd_threads_on_a_pipe_native() {
    herd(&[
        "--waiters",
        "8",
        "--messages",
        "4000",
        "--backend",
        "native",
    ]);
}

#[test]
fn c_herd_threads_on_a_pipe_emulated() {
    herd(&[
        "--waiters",
        "8",
        "--messages",
        "4000",
        "--backend",
        "emulated",
    ]);
}

/// The default is the adaptive rule; strict turns stay one option away.
#[test]
fn c_herd_threads_on_a_pipe_native_strict_turns() {
    herd(&[
        "--waiters",
        "8",
        "--messages",
        "4000",
        "--backend",
        "native",
        "--rotate",
        "1",
    ]);
}

#[test]
fn c_herd_processes_on_a_message_queue_native() {
    herd(&[
        "--processes",
        "--workload",
        "mq",
        "--waiters",
        "4",
        "--messages",
        "2000",
        "--backend",
        "native",
    ]);
}

#[test]
fn c_herd_processes_on_a_message_queue_emulated() {
    herd(&[
        "--processes",
        "--workload",
        "mq",
        "--waiters",
        "4",
        "--messages",
        "2000",
        "--backend",
        "emulated",
    ]);
}

/// docs/c.md's programs, verbatim: the first (`example.c`, `poll` renamed and the bit added)
/// and the explicit group's (`example_group.c`), each compiled and run.
#[test]
fn the_c_programs_of_the_docs_compile_and_run() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/c.md"))
        .expect("docs/c.md");
    for (at, name) in ["example", "example_group"].into_iter().enumerate() {
        let Some(exe) = build(name) else { return };
        assert!(run(&exe, &[]).contains("got job"));
        let path = format!("{}/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
        let source = std::fs::read_to_string(&path).expect("the docs' C program");
        let found = docs.find(source.trim());
        assert!(
            found.is_some(),
            "docs/c.md must show capi/c/{name}.c verbatim"
        );
        if at == 0 {
            let first = docs.find("```c").expect("docs/c.md has C programs");
            assert!(
                docs[first..]
                    .trim_start_matches("```c")
                    .trim_start()
                    .starts_with(source.trim()),
                "docs/c.md's first program must be capi/c/example.c"
            );
        }
    }
}

#[test]
fn the_poll_bits_clash_with_nothing_in_poll_h() {
    let Some(exe) = build("poll_bits") else {
        return;
    };
    assert!(run(&exe, &[]).contains("no clash"));
}

/// Runs a program of checks (one line each, a FAIL line for a check that failed, and the
/// count of those at the end) on `backend`; fails unless every check held.
fn checks_pass(program: &str, backend: &str) {
    let Some(exe) = build(program) else { return };
    let out = run(&exe, &[backend]);
    assert!(
        out.contains("0 check(s) failed") && !out.contains("FAIL"),
        "{out}"
    );
}

fn poll_shape(backend: &str) {
    checks_pass("poll_shape", backend);
}

#[test]
fn herdless_poll_fills_revents_as_poll_does_and_follows_the_array_native() {
    poll_shape("native");
}

#[test]
fn herdless_poll_fills_revents_as_poll_does_and_follows_the_array_emulated() {
    poll_shape("emulated");
}

fn events(backend: &str) {
    checks_pass("events", backend);
}

/// The caller's 64-bit data in every event, shared by two descriptors and consumed at once;
/// HERDLESS_HANGUP and HERDLESS_ERROR; a dup refused naming the registered number; an event
/// left unconsumed counted.
#[test]
fn events_carry_the_callers_data_and_hang_ups_native() {
    events("native");
}

#[test]
fn events_carry_the_callers_data_and_hang_ups_emulated() {
    events("emulated");
}

/// Seed 003's middleware from C: a supervisor forks and execs 100 server programs, which open
/// the group and the POSIX queue by name and serve 20 000 requests through herdless_poll with
/// POLLEXCL | POLLONE: none lost, none twice, and turns (Jain's index far above the raw flag's
/// one-server monopoly, about 0.01 here).
fn service_queue(backend: &str) {
    let Some(exe) = build("service_queue") else {
        return;
    };
    let out = run(
        &exe,
        &[
            "--servers",
            "100",
            "--requests",
            "20000",
            "--backend",
            backend,
        ],
    );
    let result = out
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .expect("the supervisor prints a RESULT line");
    let field = |name: &str| -> f64 {
        result
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {result}"))
    };
    for name in ["lost", "duplicated", "stray", "failed_servers"] {
        assert_eq!(field(name), 0.0, "{result}");
    }
    assert!(field("jain") > 0.8, "no turns: {result}");
}

#[test]
fn exec_d_servers_share_a_named_group_and_a_queue_native() {
    service_queue("native");
}

#[test]
fn exec_d_servers_share_a_named_group_and_a_queue_emulated() {
    service_queue("emulated");
}

fn poll_errors(backend: &str) {
    checks_pass("poll_errors", backend);
}

/// The same bad input as poll(2) gets the same answer (-1 and errno, POLLNVAL), a signal
/// handler ends the wait with EINTR, and closed or reused numbers are looked up again.
#[test]
fn herdless_poll_answers_bad_input_signals_and_reused_numbers_as_poll_does_native() {
    poll_errors("native");
}

#[test]
fn herdless_poll_answers_bad_input_signals_and_reused_numbers_as_poll_does_emulated() {
    poll_errors("emulated");
}

/// The header compiles without a warning as C89, C99 and C11 with -pedantic, and as C++98,
/// C++11 and C++17 (included twice, as headers are).
#[test]
fn the_header_is_clean_from_c89_to_c11_and_in_cpp() {
    let Some(cc) = compiler() else { return };
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../include");
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c-header");
    std::fs::create_dir_all(&out_dir).expect("the scratch directory can be made");
    let source = "#include \"herdless.h\"\n#include \"herdless.h\"\n\
                  int main(void) { return HERDLESS_OK; }\n";
    std::fs::write(out_dir.join("h.c"), source).expect("writable");
    std::fs::write(out_dir.join("h.cpp"), source).expect("writable");
    let cxx = if cc == "cc" || cc.ends_with("gcc") {
        "c++"
    } else {
        "clang++"
    };
    let mut cases: Vec<(&str, &str)> = ["c89", "c99", "c11"].iter().map(|std| (cc, *std)).collect();
    if Command::new(cxx).arg("--version").output().is_ok() {
        cases.extend(["c++98", "c++11", "c++17"].iter().map(|std| (cxx, *std)));
    } else {
        eprintln!("SKIPPED: no C++ compiler ({cxx}): the header's C++ check");
    }
    for (compiler, std) in cases {
        let file = if std.starts_with("c++") {
            "h.cpp"
        } else {
            "h.c"
        };
        let out = Command::new(compiler)
            .arg(format!("-std={std}"))
            .args([
                "-pedantic",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-fsyntax-only",
                "-I",
            ])
            .arg(&include)
            .arg(out_dir.join(file))
            .output()
            .expect("the compiler runs");
        assert!(
            out.status.success(),
            "include/herdless.h is not clean as {std}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The cost program runs (its figures are in docs/c.md; no timing is asserted here).
#[test]
fn the_poll_cost_program_runs_on_both_backends() {
    let Some(exe) = build("poll_cost") else {
        return;
    };
    for backend in ["native", "emulated"] {
        assert!(run(&exe, &["2000", "-1", backend]).contains("ns/call"));
    }
}

/// One name, one group, from C: herdless_group_remove while a member of another process lives
/// is refused (HERDLESS_EINUSE, a message naming the member's process and the forced call)
/// and changes nothing; herdless_group_remove_forced sends the member, at its next wait
/// (HERDLESS_EREMOVED), to the group the supervisor then makes; herdless_group_origin says
/// created, opened or re-made.
fn named_remove(backend: &str) {
    checks_pass("named_remove", backend);
}

#[test]
fn removing_a_named_group_in_use_is_refused_unless_forced_native() {
    named_remove("native");
}

#[test]
fn removing_a_named_group_in_use_is_refused_unless_forced_emulated() {
    named_remove("emulated");
}

/// One thread leaves a waiter while another calls herdless_wait(-1) or herdless_poll(-1) on
/// it, at a different moment each round: every round ends, the leave with HERDLESS_OK and the
/// other call with HERDLESS_EBADHANDLE (the program's alarm fails a round that hangs).
fn leave_race(backend: &str) {
    let Some(exe) = build("leave_race") else {
        return;
    };
    let out = run(&exe, &[backend, "5000"]);
    assert!(
        out.contains("0 check(s) failed; every round ended"),
        "{out}"
    );
}

#[test]
fn leave_while_another_thread_waits_always_ends_native() {
    leave_race("native");
}

#[test]
fn leave_while_another_thread_waits_always_ends_emulated() {
    leave_race("emulated");
}

fn waiter_fd(backend: &str) {
    checks_pass("waiter_fd", backend);
}

/// herdless_waiter_fd: two waiters each in an epoll loop of its own on one shared pipe; each
/// message fires one loop and is read once, and both take turns; a notification; a forked
/// child's copy refused; herdless_leave closes the descriptor.
#[test]
fn a_waiter_in_another_event_loop_from_c_native() {
    waiter_fd("native");
}

#[test]
fn a_waiter_in_another_event_loop_from_c_emulated() {
    waiter_fd("emulated");
}

/// Runs a built program with `HERDLESS_BACKEND=backend` (the backend of herdless_poll_shared's
/// lines); panics with its output unless it exits 0.
fn run_on_line(exe: &Path, args: &[&str], backend: &str) -> String {
    let out: Output = Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("HERDLESS_BACKEND", backend)
        .output()
        .expect("the program runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "{} {args:?} (HERDLESS_BACKEND={backend}) exited with {}:\n{stdout}",
        exe.display(),
        out.status
    );
    stdout
}

fn shared_pollone(backend: &str) {
    let Some(exe) = build("shared_pollone") else {
        return;
    };
    let out = run_on_line(&exe, &[], backend);
    assert!(
        out.contains("the four calls served fd1, fd2, fd3, fd1"),
        "{out}"
    );
}

/// The seed's illustration, verbatim but for `poll` renamed to herdless_poll_shared: no
/// group, no waiter; fds[0], fds[1], fds[2], fds[0].
#[test]
fn the_seeds_four_calls_through_herdless_poll_shared_native() {
    shared_pollone("native");
}

#[test]
fn the_seeds_four_calls_through_herdless_poll_shared_emulated() {
    shared_pollone("emulated");
}

/// 32 servers started by a shell with setsid (no common parent, each in a session of its
/// own), no group call: each opens the POSIX queue by name and loops on herdless_poll_shared
/// with POLLIN | HERDLESS_POLLEXCL | HERDLESS_POLLONE. 3 200 requests, twice: as fast as the
/// queue takes them (a backlog throughout) and 300 µs apart. Each time none is lost, none read
/// twice, every server unrelated; turns (Jain's index; the raw flag's monopoly is about 0.03)
/// on both backends, with requests apart and under the backlog. Natively a server whose turn
/// ends under the backlog stands aside and hands the turn on (`src/sys/linux/native/aside.rs`):
/// before that it found the backlog ready at once on its re-add, and 20 runs here gave Jain
/// 0.33–0.998 under the backlog; with it, 0.986–0.996 in 6 runs.
fn shared_servers(backend: &str) {
    let Some(exe) = build("shared_servers") else {
        return;
    };
    for gap_us in ["0", "300"] {
        let args = ["--servers", "32", "--requests", "3200", "--gap-us", gap_us];
        let out = run_on_line(&exe, &args, backend);
        let result = out
            .lines()
            .find(|l| l.starts_with("RESULT "))
            .expect("the supervisor prints a RESULT line");
        let field = |name: &str| -> f64 {
            result
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {result}"))
        };
        for name in ["lost", "duplicated", "stray"] {
            assert_eq!(field(name), 0.0, "{result}");
        }
        assert_eq!(field("unrelated"), 32.0, "{result}");
        assert_eq!(field("stopped"), 32.0, "{result}");
        assert!(field("jain") > 0.8, "no turns, gap {gap_us} µs: {result}");
    }
}

#[test]
fn unrelated_servers_share_a_queue_through_herdless_poll_shared_native() {
    shared_servers("native");
}

#[test]
fn unrelated_servers_share_a_queue_through_herdless_poll_shared_emulated() {
    shared_servers("emulated");
}

/// herdless_poll_shared keeps poll()'s promises: plain poll() without the bits, POLLNVAL at
/// once, reused numbers, EINTR, a timeout under a signal every millisecond, HERDLESS_ELINES.
fn shared_errors(backend: &str) {
    let Some(exe) = build("shared_errors") else {
        return;
    };
    let out = run_on_line(&exe, &[], backend);
    assert!(
        out.contains("0 check(s) failed") && !out.contains("FAIL"),
        "{out}"
    );
}

#[test]
fn herdless_poll_shared_keeps_polls_promises_native() {
    shared_errors("native");
}

#[test]
fn herdless_poll_shared_keeps_polls_promises_emulated() {
    shared_errors("emulated");
}
