//! Test-only stacks, registered through the same registry as real ones. `fake-openssl` is
//! the OpenSSL stack under another name: the loops run whatever the registry names.
//! `broken-wrong-group` negotiates like OpenSSL but reports a group it did not negotiate:
//! the client loop's check must refuse it.

use super::OpenSsl;
use crate::out::Result;
use crate::tls::record::Negotiated;
use crate::tls::stack::{
    ClientContext, ClientSetup, Handshake, HeapCounting, ReadOutcome, ServerContext, ServerName,
    ServerSetup, Session, Stack, StackInfo, Verification,
};
use crate::tls::transport::tcp::Wire;
use std::sync::Arc;

pub const STACKS: [&dyn Stack; 2] = [&FakeOpenssl, &WrongGroup];

pub struct FakeOpenssl;

impl Stack for FakeOpenssl {
    fn name(&self) -> &'static str {
        "fake-openssl"
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
            ..OpenSsl.describe()?
        })
    }
    fn heap_counting(&self) -> HeapCounting {
        OpenSsl.heap_counting()
    }
}

pub struct WrongGroup;

impl Stack for WrongGroup {
    fn name(&self) -> &'static str {
        "broken-wrong-group"
    }
    fn reports_messages(&self) -> bool {
        OpenSsl.reports_messages()
    }
    fn server(&self, setup: &ServerSetup) -> Result<Arc<dyn ServerContext>> {
        OpenSsl.server(setup)
    }
    fn client(&self, setup: &ClientSetup) -> Result<Box<dyn ClientContext>> {
        Ok(Box::new(WrongClient(OpenSsl.client(setup)?)))
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
            ..OpenSsl.describe()?
        })
    }
    fn heap_counting(&self) -> HeapCounting {
        OpenSsl.heap_counting()
    }
}

struct WrongClient(Box<dyn ClientContext>);

impl ClientContext for WrongClient {
    fn security_level(&self) -> Option<u32> {
        self.0.security_level()
    }
    fn start(&self, wire: Wire, name: &ServerName) -> Result<Box<dyn Handshake>> {
        Ok(Box::new(WrongHandshake(self.0.start(wire, name)?)))
    }
}

struct WrongHandshake(Box<dyn Handshake>);

impl Handshake for WrongHandshake {
    fn run(self: Box<Self>) -> Result<Box<dyn Session>> {
        Ok(Box::new(WrongSession(self.0.run()?)))
    }
}

struct WrongSession(Box<dyn Session>);

impl Session for WrongSession {
    fn read(&mut self, buf: &mut [u8]) -> Result<ReadOutcome> {
        self.0.read(buf)
    }
    fn write_all(&mut self, data: &[u8]) -> Result<()> {
        self.0.write_all(data)
    }
    fn flush(&mut self) -> Result<()> {
        self.0.flush()
    }
    fn close(&mut self, wait_for_peer: bool) {
        self.0.close(wait_for_peer)
    }
    /// X448 whatever was negotiated (X25519 if it really was X448), name and code agreeing
    /// with each other so only the comparison with what was asked for can catch it.
    fn negotiated(&self) -> Negotiated {
        let mut n = self.0.negotiated();
        let (name, code) = if n.group_code == Some(30) {
            ("x25519", 29)
        } else {
            ("x448", 30)
        };
        n.group = Some(name.into());
        n.group_code = Some(code);
        n
    }
    fn server_name(&self) -> Option<String> {
        self.0.server_name()
    }
    fn peer_chain_der_bytes(&self) -> Option<Vec<usize>> {
        self.0.peer_chain_der_bytes()
    }
    fn verification(&self) -> Verification {
        self.0.verification()
    }
}
