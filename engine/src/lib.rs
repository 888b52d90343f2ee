//! pqlab's engine as a library: every command, the stack-neutral TLS loops, records,
//! capture, clocks, and the stacks that need no licence beyond the engine's own (OpenSSL,
//! rustls). A program is this library plus its stacks: `pqlab-engine` (src/main.rs) adds
//! none, a helper program under another licence adds the stack it links (`cli::run` takes
//! them). Arguments in, JSON lines out (protocol in `docs/engine-protocol.md`); no
//! statistics, no plots. Layers, lowest first (`tests/structure.rs` keeps them): the base
//! (`out`, clocks, heap and stack counting, secrets); the measurements (`primitives`,
//! `aead`, `dhparams`, `capture`, `linkem`); `tls`; `info`; `cli`.

pub mod aead;
pub mod capture;
pub mod cli;
pub mod cputime;
pub mod dhparams;
pub mod heap;
pub mod info;
pub mod lifecycle;
pub mod linkem;
pub mod out;
pub mod paint;
pub mod primitives;
pub mod secrets;
pub mod tls;

/// For the allocator wrappers a program defines with `count_c_allocator!`.
pub use libc;
