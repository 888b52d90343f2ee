//! `pqlab-engine-wolfssl`: the engine library with the wolfSSL stack (GPL-2.0-or-later,
//! as wolfSSL is) besides the library's own stacks, and the C allocator counted. It speaks
//! the engine protocol; the lab runs it for `--stack wolfssl`.

mod wolf;

pqlab_engine::count_c_allocator!();

static STACKS: [&dyn pqlab_engine::tls::stack::Stack; 1] = [&wolf::WOLFSSL];

fn main() {
    pqlab_engine::cli::run(pqlab_engine::cli::Program {
        name: "pqlab-engine-wolfssl",
        stacks: &STACKS,
    });
}

/// The contract every TLS stack keeps, run for this program's stacks in this program (its
/// registry: the library's stacks and wolfSSL, which it interoperates with both ways).
#[cfg(test)]
mod contract {
    pqlab_engine::contract_suite!(&super::STACKS);
}
