//! The `statico` binary: parse the flags, run the server, map failures to exit codes
//! (2: a flag's value is wrong; 1: the machine refused, e.g. the port is in use).

use clap::Parser;
use statico::cli::Cli;
use statico::server::{self, StartError};

fn main() {
    let cli = Cli::parse();
    if let Some(dir) = &cli.generate_docs {
        if let Err(e) = Cli::generate_docs(dir) {
            eprintln!("statico: error: --generate-docs {}: {e}", dir.display());
            std::process::exit(1);
        }
        return;
    }
    match server::run(cli) {
        Ok(()) => {}
        Err(StartError::Usage(e)) => {
            eprintln!("statico: error: {e:#}");
            std::process::exit(2);
        }
        Err(StartError::Runtime(e)) => {
            eprintln!("statico: error: {e:#}");
            std::process::exit(1);
        }
    }
}
