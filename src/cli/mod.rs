//! The client subcommands (`memmachine projects|add|search|list|delete|features`): a
//! thin gRPC client of a running server. Each command builds one request (or a few, for
//! paging and batches), sends it with the key from `MEMMACHINE_API_KEY`, and prints the
//! answer as a table, or as JSON with `--json`. Every refusal is one line on stderr and
//! an exit code from the table in `EXIT_CODES`.

mod add;
mod connect;
mod delete;
mod errors;
mod extraction;

/// Status code names as the gRPC specification spells them (shared with the benches).
pub use errors::code_name;
mod features;
mod forget;
mod list;
mod output;
mod projects;
mod search;
mod usage;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

pub use errors::CliError;

/// The exit-code table as a literal, so other help texts can `concat!` it.
macro_rules! exit_codes_text {
    () => {
        "\
Exit codes:
  0  success
  1  the server failed (INTERNAL, UNKNOWN, UNIMPLEMENTED, DATA_LOSS, ...) or another error
  2  usage: bad flags or arguments
  3  cannot reach the server (address, TLS set-up, connection refused, timeout)
  4  invalid input: INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE, or a stdin
     line that is not a message
  5  NOT_FOUND
  6  ALREADY_EXISTS
  7  UNAUTHENTICATED or PERMISSION_DENIED (set MEMMACHINE_API_KEY)
  8  retry later: UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, CANCELLED

The API key is read from the environment variable MEMMACHINE_API_KEY (sent as
`authorization: Bearer KEY`); it is never a flag, so it stays out of process lists."
    };
}
pub(crate) use exit_codes_text;

/// The exit codes of the client subcommands (also in the README).
pub const EXIT_CODES: &str = exit_codes_text!();

/// The flags every client subcommand takes: where the server is, how to reach it, the
/// project addressed and the output format.
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// The server's gRPC address, host:port or http(s)://host:port
    #[arg(
        long,
        global = true,
        env = "MEMMACHINE_ADDR",
        default_value = "127.0.0.1:50051"
    )]
    pub addr: String,
    /// CA certificate (PEM) to check a TLS server with (the calls use TLS when set)
    #[arg(long, global = true)]
    pub tls_ca: Option<PathBuf>,
    /// Name the server's certificate must carry [default: the host of --addr]
    #[arg(long, global = true, requires = "tls_ca")]
    pub tls_domain: Option<String>,
    /// Client certificate (PEM), for a server with --tls-client-ca
    #[arg(long, global = true, requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM)
    #[arg(long, global = true, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The org [default: universal; `projects list`: every org the key reaches]
    #[arg(long, global = true, env = "MEMMACHINE_ORG")]
    pub org: Option<String>,
    /// The project
    #[arg(
        long,
        global = true,
        env = "MEMMACHINE_PROJECT",
        default_value = "universal"
    )]
    pub project: String,
    /// Print the answer as JSON (for scripts and jq) instead of a table
    #[arg(long, global = true)]
    pub json: bool,
    /// Give up on connecting, and on each call, after this many seconds
    #[arg(long, global = true, default_value_t = 30)]
    pub timeout_secs: u64,
}

/// The memory types a command may name.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryTypeArg {
    Episodic,
    Semantic,
}

impl MemoryTypeArg {
    fn wire(types: &[MemoryTypeArg]) -> Vec<i32> {
        types
            .iter()
            .map(|t| match t {
                MemoryTypeArg::Episodic => memmachine_proto::v2::MemoryType::Episodic as i32,
                MemoryTypeArg::Semantic => memmachine_proto::v2::MemoryType::Semantic as i32,
            })
            .collect()
    }
}

/// `KEY=VALUE`, for `--meta` and `--set-meta`.
fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// The client subcommands, flattened into `memmachine`'s own.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Projects of a running server: list, create, get, delete, count (episodes)
    #[command(subcommand_required = true, after_long_help = EXIT_CODES)]
    Projects {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: projects::ProjectsCommand,
    },
    /// Add messages to a project of a running server: from the arguments, or from
    /// standard input (one message per line, or JSON Lines), in batches
    #[command(after_long_help = add::ADD_HELP)]
    Add(add::AddArgs),
    /// Search a project's memories (episodic and semantic)
    #[command(after_long_help = EXIT_CODES)]
    Search(search::SearchArgs),
    /// List a project's episodes (or --semantic features), page by page or --all
    #[command(after_long_help = EXIT_CODES)]
    List(list::ListArgs),
    /// Delete episodes (or --features) by id
    #[command(after_long_help = EXIT_CODES)]
    Delete(delete::DeleteArgs),
    /// Semantic features (facts) of a project: add, get, update, search, list, delete
    #[command(subcommand_required = true, after_long_help = EXIT_CODES)]
    Features {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: features::FeaturesCommand,
    },
    /// An org's language-model and embedder usage per purpose, and its token budget
    /// (the whole org, or one project with --project)
    #[command(after_long_help = EXIT_CODES)]
    Usage(usage::UsageArgs),
    /// An org's daily language-model token budget (an admin key)
    #[command(subcommand_required = true, after_long_help = EXIT_CODES)]
    Budget {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: usage::BudgetCommand,
    },
    /// A project's extraction backlog and its estimated cost; pause or resume its
    /// extraction
    #[command(subcommand_required = true, after_long_help = EXIT_CODES)]
    Extraction {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: extraction::ExtractionCommand,
    },
    /// Forget a subject (a user) everywhere in an org, with a receipt; `--dry-run`
    /// counts first; `forget receipt ID` shows a past receipt
    #[command(after_long_help = EXIT_CODES)]
    Forget(forget::ForgetArgs),
}

/// Runs one client subcommand; prints its errors and gives its exit code.
pub fn run(command: Command) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("memmachine: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("memmachine: {}", err.line());
            ExitCode::from(err.exit_code())
        }
    }
}

async fn dispatch(command: Command) -> Result<(), CliError> {
    match command {
        Command::Projects { client, command } => projects::run(&client, command).await,
        Command::Add(args) => add::run(args).await,
        Command::Search(args) => search::run(args).await,
        Command::List(args) => list::run(args).await,
        Command::Delete(args) => delete::run(args).await,
        Command::Features { client, command } => features::run(&client, command).await,
        Command::Usage(args) => usage::run(args).await,
        Command::Budget { client, command } => usage::budget(&client, command).await,
        Command::Extraction { client, command } => extraction::run(&client, command).await,
        Command::Forget(args) => forget::run(args).await,
    }
}
