//! The engine dies with the process that started it, so a killed lab leaves nothing
//! behind: no TLS server holding its port, no capture, no link emulator with its TUN
//! devices. The kernel sends a signal when the parent goes (PR_SET_PDEATHSIG); a parent
//! that went before that was set up is caught by checking the parent pid afterwards.
//!
//! Note: Linux sends the signal when the *thread* that started the engine exits, so the
//! lab must start engines from a thread that outlives them (e.g. its main thread).

use std::os::unix::fs::MetadataExt;

/// The parent's pid, read as early as main can.
pub fn parent() -> libc::pid_t {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() }
}

/// Have the kernel send `signal` when the parent goes away, and exit at once, as if killed
/// by `signal`, if it already has.
pub fn die_with_parent(parent_at_start: libc::pid_t, signal: libc::c_int) {
    // SAFETY: plain prctl with a valid signal number.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) };
    if orphaned(parent_at_start, parent(), in_initial_pid_namespace()) {
        std::process::exit(128 + signal);
    }
}

/// Whether the parent is gone already: it changed since main started (the engine was
/// handed to init or a subreaper), or it is init of the host's PID namespace, which starts
/// no engines (the parent died even before main). Inside a container PID 1 may be the lab
/// itself, so there a parent of 1 is taken at its word.
fn orphaned(at_start: libc::pid_t, now: libc::pid_t, initial_namespace: bool) -> bool {
    now != at_start || (now == 1 && initial_namespace)
}

/// The inode number Linux gives the initial PID namespace (PROC_PID_INIT_INO).
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

fn in_initial_pid_namespace() -> bool {
    std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() == PROC_PID_INIT_INO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_or_init_parent_means_orphaned() {
        assert!(!orphaned(4242, 4242, true));
        assert!(orphaned(4242, 1, false), "reparented to init");
        assert!(orphaned(4242, 777, true), "reparented to a subreaper");
        assert!(
            orphaned(1, 1, true),
            "parent gone before main, host namespace"
        );
        assert!(
            !orphaned(1, 1, false),
            "container whose PID 1 started the engine"
        );
        // The test runner is this process's live parent.
        assert!(!orphaned(parent(), parent(), in_initial_pid_namespace()) || parent() == 1);
    }
}
