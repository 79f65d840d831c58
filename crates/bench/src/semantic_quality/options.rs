//! The command line, and the arguments it gives `memmachine serve`.

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    about = "Measures semantic memory's recall on LoCoMo with a real (or scripted) language \
             model, beside episodic recall, and what distillation cost and made"
)]
pub struct Args {
    /// LoCoMo data set (a JSON list of conversations with questions)
    #[arg(long, default_value = "/work/shared/data/locomo10.json")]
    pub locomo: PathBuf,
    /// Conversations to use: this many, after --skip (ignored with --conversation-ids)
    #[arg(long, default_value_t = 2)]
    pub conversations: usize,
    /// Conversations to leave out first
    #[arg(long, default_value_t = 0)]
    pub skip: usize,
    /// The conversations to use, by sample id (e.g. conv-26,conv-30)
    #[arg(long, value_delimiter = ',')]
    pub conversation_ids: Vec<String>,
    /// Use only the first N turns of each conversation, and score only the questions all
    /// of whose evidence lies within them [default: every turn]
    #[arg(long, value_name = "N")]
    pub turns: Option<usize>,
    /// OpenAI-compatible chat endpoint, e.g. http://127.0.0.1:18080/v1
    #[arg(long, required_unless_present = "scripted")]
    pub llm_base_url: Option<String>,
    /// Model name sent to --llm-base-url
    #[arg(long, required_unless_present = "scripted")]
    pub llm_model: Option<String>,
    /// The endpoint's API key (given to the server as MEMMACHINE_LLM_API_KEY)
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub llm_api_key: Option<String>,
    /// Seconds one model call may take (the server's --llm-timeout)
    #[arg(long, default_value_t = 300.0)]
    pub llm_timeout: f64,
    /// Use the scripted chat model served from this process instead of an endpoint
    #[arg(long, conflicts_with_all = ["llm_base_url", "llm_model"])]
    pub scripted: bool,
    /// The server's --embedder [default: local with --model-dir if it exists, else hash]
    #[arg(long)]
    pub embedder: Option<String>,
    /// The local embedder's model directory
    #[arg(long, default_value = ".tools/models/all-MiniLM-L6-v2")]
    pub model_dir: PathBuf,
    /// The server's --semantic-trigger-messages (a set's batch size)
    #[arg(long, default_value_t = 20)]
    pub trigger_messages: usize,
    /// The server's --semantic-trigger-age, in seconds
    #[arg(long, default_value_t = 2.0)]
    pub trigger_age: f64,
    /// The server's --semantic-lease, in seconds
    #[arg(long, default_value_t = 3600.0)]
    pub semantic_lease: f64,
    /// Keep the server's short-term summaries (model calls of purpose `summary`)
    #[arg(long)]
    pub summaries: bool,
    /// Give each project's set a category `events` so turns are distilled into it too
    #[arg(long)]
    pub project_category: bool,
    /// Every project's ranking (ProjectConfig.reranker)
    #[arg(long, default_value = "hybrid")]
    pub reranker: String,
    /// top_k of every search
    #[arg(long, default_value_t = 20)]
    pub top_k: i32,
    /// Messages per AddMemories call
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Longest wait, in seconds from the first add, for the semantic queue to drain
    #[arg(long, default_value_t = 3600)]
    pub max_wait: u64,
    /// Seconds between progress lines while waiting
    #[arg(long, default_value_t = 10)]
    pub progress_secs: u64,
    /// Longest wait, in seconds, for the episodes' vectors once the queue drained
    #[arg(long, default_value_t = 600)]
    pub embed_wait_secs: u64,
    /// Extra arguments for `memmachine serve`, split on whitespace (no quoting)
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub server_args: String,
    /// Server executable [default: `memmachine` next to this executable]
    #[arg(long)]
    pub server: Option<PathBuf>,
    /// Write the figures as JSON to this file
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write every feature as a JSON line to this file
    #[arg(long)]
    pub dump_features: Option<PathBuf>,
    /// Write the server's last /metrics text to this file
    #[arg(long)]
    pub metrics_dump: Option<PathBuf>,
    /// Least cosine (all-MiniLM-L6-v2) of an annotated fact and a feature's "name: value"
    /// for the feature to match the fact
    #[arg(long, default_value_t = 0.5)]
    pub fact_threshold: f32,
    /// Keep the server's data directory in DIR (new or empty) for a later --reuse
    #[arg(long, value_name = "DIR", conflicts_with = "reuse")]
    pub keep_data: Option<PathBuf>,
    /// Start the server on the data directory a --keep-data run left in DIR: no adds, no
    /// waiting; the questions and the figures again (same conversations and --turns)
    #[arg(long, value_name = "DIR")]
    pub reuse: Option<PathBuf>,
}

impl Args {
    /// Refuses values out of bounds and data directories that do not fit.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=1000).contains(&self.top_k) {
            return Err("--top-k must be 1 to 1000".into());
        }
        if !(0.0..=1.0).contains(&self.fact_threshold) {
            return Err("--fact-threshold must be 0 to 1".into());
        }
        let non_empty =
            |dir: &std::path::Path| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some());
        if let Some(dir) = &self.keep_data
            && (dir.is_file() || non_empty(dir))
        {
            return Err(format!(
                "--keep-data {}: not an empty directory (a run keeps its data in a new one)",
                dir.display()
            ));
        }
        if let Some(dir) = &self.reuse
            && !non_empty(dir)
        {
            return Err(format!(
                "--reuse {}: no data directory there (make one with --keep-data)",
                dir.display()
            ));
        }
        Ok(())
    }
}

/// The server's arguments.
pub fn server_args(args: &Args, base_url: &str, model: &str, metrics_port: u16) -> Vec<String> {
    let mut list: Vec<String> = vec![
        "--llm-base-url".into(),
        base_url.into(),
        "--llm-model".into(),
        model.into(),
        "--llm-timeout".into(),
        args.llm_timeout.to_string(),
        "--llm-max-calls-per-minute".into(),
        "0".into(),
        "--semantic-trigger-messages".into(),
        args.trigger_messages.to_string(),
        "--semantic-trigger-age".into(),
        args.trigger_age.to_string(),
        "--semantic-lease".into(),
        args.semantic_lease.to_string(),
        "--metrics-listen".into(),
        format!("127.0.0.1:{metrics_port}"),
        "--embedder".into(),
        embedder(args),
    ];
    if embedder(args) == "local" {
        list.extend(["--model-dir".into(), args.model_dir.display().to_string()]);
    }
    if !args.summaries {
        list.extend(["--short-term-window".into(), "0".into()]);
    }
    list.extend(args.server_args.split_whitespace().map(str::to_string));
    list
}

/// The embedder: as given, else local when its model directory exists, else hash.
pub fn embedder(args: &Args) -> String {
    match &args.embedder {
        Some(name) => name.clone(),
        None if args.model_dir.join("config.json").is_file() => "local".into(),
        None => "hash".into(),
    }
}

/// The endpoint without user info, query or fragment (where a key could hide).
pub fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.to_string()
        }
        Err(_) => "<unparsed URL>".into(),
    }
}
