//! Placeholder until implemented.
use crate::out::Result;

#[derive(clap::Args)]
pub struct KemArgs {}
#[derive(clap::Args)]
pub struct SigArgs {}

pub fn run_kem(_a: KemArgs) -> Result<()> {
    crate::bail!("kem is not built into this engine yet")
}
pub fn run_sig(_a: SigArgs) -> Result<()> {
    crate::bail!("sig is not built into this engine yet")
}
