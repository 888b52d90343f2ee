//! Placeholder until implemented.
use crate::out::Result;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_a: Args) -> Result<()> {
    crate::bail!("'aead' is not built into this engine yet")
}
