//! (being written)

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_workload: Workload, _args: Args) -> Result<(), Box<dyn std::error::Error>> {
    Err("not written yet".into())
}

pub enum Workload {
    Pipe,
    Mq,
}

pub fn default_comparison() -> Result<(), Box<dyn std::error::Error>> {
    Err("not written yet".into())
}
