//! pqlab-engine: the timed half of pqlab. Arguments in, JSON lines out (protocol in
//! `docs/engine-protocol.md`); no statistics, no plots.

mod aead;
mod capture;
mod cputime;
mod dhparams;
mod heap;
mod info;
mod lifecycle;
mod linkem;
mod out;
mod paint;
mod primitives;
mod secrets;
mod tls;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "pqlab-engine",
    version,
    about = "pqlab's measuring engine (JSON lines out)"
)]
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
    /// TLS server, client, certificates (OpenSSL libssl).
    #[command(subcommand)]
    Tls(tls::Command),
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

fn main() {
    let parent = lifecycle::parent();
    let cli = Cli::try_parse().unwrap_or_else(|e| out::fail_arguments(e));
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
        Command::Tls(c) => tls::run(c),
        Command::Capture(a) => capture::run(a),
        Command::Linkem(a) => linkem::run(a),
        Command::Aead(a) => aead::run(a),
        Command::Dhparams(a) => dhparams::run(a),
    };
    if let Err(e) = result {
        out::fail(&e);
    }
}
