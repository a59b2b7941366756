//! The `zinc` command.

use clap::Parser;

fn main() {
    let args = zinc::cli::Cli::parse();
    zinc::cli::init_logging();
    match zinc::cli::run(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("zinc: {e:#}");
            std::process::exit(1);
        }
    }
}
