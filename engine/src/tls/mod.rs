//! Placeholder until implemented.
use crate::out::Result;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Not yet built.
    Server,
}

pub fn run(_c: Command) -> Result<()> {
    crate::bail!("tls is not built into this engine yet")
}
