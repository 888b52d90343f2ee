//! A TLS stack defined outside the library, in a program of its own (this test), the way a
//! new stack is added: it implements the traits of `tls::stack` (here by handing every call
//! to the library's OpenSSL stack, under a name of its own) and the program runs the whole
//! contract suite for it, which adds it to the program's registry. It claims no more than
//! the traits' defaults for the rest (no fixed randomness, no reference mode).

use pqlab_engine::out::Result;
use pqlab_engine::tls::stack::{
    ClientContext, ClientSetup, HeapCounting, ServerContext, ServerSetup, Stack, StackInfo,
};
use pqlab_engine::tls::stacks::openssl::OpenSsl;
use std::sync::Arc;

struct Outside;

impl Stack for Outside {
    fn name(&self) -> &'static str {
        "outside-openssl"
    }
    fn reports_messages(&self) -> bool {
        OpenSsl.reports_messages()
    }
    fn server(&self, setup: &ServerSetup) -> Result<Arc<dyn ServerContext>> {
        OpenSsl.server(setup)
    }
    fn client(&self, setup: &ClientSetup) -> Result<Box<dyn ClientContext>> {
        OpenSsl.client(setup)
    }
    fn group_code(&self, name: &str) -> Option<u16> {
        OpenSsl.group_code(name)
    }
    fn sigalg_code(&self, name: &str) -> Option<u16> {
        OpenSsl.sigalg_code(name)
    }
    fn describe(&self) -> Result<StackInfo> {
        Ok(StackInfo {
            name: self.name(),
            fixed_random: self.fixed_random(),
            ..OpenSsl.describe()?
        })
    }
    fn heap_counting(&self) -> HeapCounting {
        OpenSsl.heap_counting()
    }
}

static STACKS: [&dyn Stack; 1] = [&Outside];

pqlab_engine::contract_suite!(&STACKS);
