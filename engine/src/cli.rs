//! The command line of every program of the engine: the commands, and `run`, a program's
//! main (a program is the library plus the TLS stacks it links: `Program`).

use crate::{aead, capture, dhparams, heap, info, lifecycle, linkem, out, primitives, tls};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(version, about = "pqlab's measuring engine (JSON lines out)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Library versions, build and the algorithms each backend provides.
    Info(info::Args),
    /// Time KEM / key-agreement operations (keygen, encaps, decaps).
    Kem(primitives::KemArgs),
    /// Time signature operations (keygen, sign, verify).
    Sig(primitives::SigArgs),
    /// TLS server, client, certificates (every TLS stack of this program).
    #[command(subcommand)]
    Tls(tls::commands::Command),
    /// Packet capture with kernel timestamps.
    Capture(capture::Args),
    /// Userspace link emulator between two TUN devices.
    Linkem(linkem::Args),
    /// AEAD / cipher throughput.
    Aead(aead::Args),
    /// TLS 1.2 DHE parameters (named or newly generated) and their private exponent length.
    Dhparams(dhparams::Args),
}

/// The signal the engine gets when its parent dies. Capture and the link emulator clean up
/// on SIGTERM (the pcap is finished, the TUN devices removed); everything else has nothing
/// to clean up and must surely stop (a TLS server must release its port), so SIGKILL.
fn death_signal(c: &Command) -> libc::c_int {
    match c {
        Command::Capture(_) | Command::Linkem(_) => libc::SIGTERM,
        _ => libc::SIGKILL,
    }
}

/// A program of the engine: its name (in `--help` and error lines) and the TLS stacks it
/// adds to the library's.
pub struct Program {
    pub name: &'static str,
    pub stacks: &'static [&'static dyn tls::stack::Stack],
}

/// The program's main: parse the command line, run the command, exit with its code.
pub fn run(program: Program) {
    use clap::{CommandFactory, FromArgMatches};
    out::set_program(program.name);
    tls::registry::add(program.stacks);
    let parent = lifecycle::parent();
    let cli = Cli::command()
        .name(program.name)
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
        .unwrap_or_else(|e| out::fail_arguments(e));
    lifecycle::die_with_parent(parent, death_signal(&cli.command));
    // Before anything touches OpenSSL: libcrypto accepts allocator hooks only until its
    // first allocation.
    if matches!(&cli.command, Command::Tls(t) if t.counts_heap()) {
        if let Err(e) = heap::install() {
            out::fail(&e);
        }
        heap::count_malloc(true);
    }
    let result = match cli.command {
        Command::Info(a) => info::run(a),
        Command::Kem(a) => primitives::run_kem(a),
        Command::Sig(a) => primitives::run_sig(a),
        Command::Tls(c) => tls::commands::run(c),
        Command::Capture(a) => capture::run(a),
        Command::Linkem(a) => linkem::run(a),
        Command::Aead(a) => aead::run(a),
        Command::Dhparams(a) => dhparams::run(a),
    };
    if let Err(e) = result {
        out::fail(&e);
    }
}
