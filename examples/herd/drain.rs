//! (being written)

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> Result<(), Box<dyn std::error::Error>> {
    Err("not written yet".into())
}
