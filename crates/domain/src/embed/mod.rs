//! Embedders turn text into dense vectors for semantic (vector) search. One trait, with
//! implementations chosen by `--embedder`: `hash` (deterministic, for tests), `local`
//! (a Hugging Face sentence-embedding model run in-process), `openai` (any
//! OpenAI-compatible `/v1/embeddings` endpoint) and `none` (lexical search only).

pub mod fetch;
pub mod hash;
pub mod local;
pub mod measured;
pub mod openai;
pub mod registry;
mod settings;

pub use registry::Embedders;
pub use settings::{
    DEFAULT_MODEL_DIR, EmbedderKernel, EmbedderKind, EmbedderPrecision, Flags, Settings,
};

use std::time::Duration;

use async_trait::async_trait;

/// Longest a search waits for the vector of its query. Embedding a question takes
/// milliseconds on the CPU and a few hundred on a remote endpoint; one that takes longer
/// is down, overloaded or retrying, and the search goes on without it (hybrid ranks by
/// text, dense answers `UNAVAILABLE`) rather than wait out its timeouts and retries.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Why embedding failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// Worth retrying later (the endpoint is down, overloaded, timed out).
    #[error("embedder unavailable: {0}")]
    Unavailable(String),
    /// Will not succeed on retry (bad configuration, a dimension that does not match).
    #[error("embedder failed: {0}")]
    Failed(String),
}

#[async_trait]
pub trait Embedder: Send + Sync {
    /// A stable name of the model and its settings, stored with every vector it made
    /// (vectors of different embedders are never compared).
    fn id(&self) -> &str;

    /// Length of every vector.
    fn dimensions(&self) -> usize;

    /// One L2-normalised vector per text, in order. Implementations that compute must
    /// not block the async executor (use `spawn_blocking` or a thread of their own).
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;

    /// The vector of a search's query: `embed` of that one text, within
    /// [`QUERY_TIMEOUT`] (past it, [`EmbedError::Unavailable`]).
    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let texts = [text.to_string()];
        match tokio::time::timeout(QUERY_TIMEOUT, self.embed(&texts)).await {
            Ok(Ok(mut vectors)) if vectors.len() == 1 => Ok(vectors.remove(0)),
            Ok(Ok(vectors)) => Err(EmbedError::Failed(format!(
                "{} returned {} vectors for one query",
                self.id(),
                vectors.len()
            ))),
            Ok(Err(err)) => Err(err),
            Err(_) => Err(EmbedError::Unavailable(format!(
                "{} did not embed the query within {QUERY_TIMEOUT:?}",
                self.id()
            ))),
        }
    }

    /// Tokens embedded so far, as the model counts them (0 for embedders without
    /// tokens).
    fn tokens(&self) -> u64 {
        0
    }

    /// The product kernel of an in-process model (`--embedder-kernel`), else `None`.
    fn kernel(&self) -> Option<&'static str> {
        None
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// The embedders the configuration offers projects: the default one `--embedder`
/// asks for (if any) and `hash`.
pub async fn build(config: &Settings) -> Result<Embedders, String> {
    let kind = config.kind.unwrap_or_else(|| {
        if fetch::model_present(&config.model_dir) {
            EmbedderKind::Local
        } else {
            EmbedderKind::None
        }
    });
    let default: Option<(&str, std::sync::Arc<dyn Embedder>)> = match kind {
        EmbedderKind::None => None,
        EmbedderKind::Hash => Some((
            "hash",
            std::sync::Arc::new(hash::HashEmbedder::new(config.dimensions.unwrap_or(256))),
        )),
        EmbedderKind::Local => Some(("local", std::sync::Arc::new(load_local(config).await?))),
        EmbedderKind::Openai => {
            Some(("openai", std::sync::Arc::new(connect_openai(config).await?)))
        }
    };
    Ok(Embedders::new(default, None))
}

async fn load_local(config: &Settings) -> Result<local::LocalEmbedder, String> {
    let dir = config.model_dir.clone();
    let kernel = match (config.kernel.kernel(), config.precision) {
        (Some(kernel), _) => kernel,
        (None, EmbedderPrecision::Auto) => local::Kernel::choose(),
        (None, EmbedderPrecision::F32) => local::Kernel::best_f32(),
        (None, EmbedderPrecision::Bf16) => local::Kernel::best_bf16().unwrap_or_else(|| {
            tracing::warn!("--embedder-precision bf16: this CPU has no bf16 products; using f32");
            local::Kernel::best_f32()
        }),
    };
    tokio::task::spawn_blocking(move || local::LocalEmbedder::load_with(&dir, kernel))
        .await
        .map_err(|err| format!("loading the model: {err}"))?
        .map_err(|err| {
            format!(
                "{err} (model dir {}; `memmachine model fetch` puts all-MiniLM-L6-v2 there)",
                config.model_dir.display()
            )
        })
}

/// Longest the server waits at start-up for the embeddings endpoint's first answer.
const STARTUP_PROBE: Duration = Duration::from_secs(5);

async fn connect_openai(config: &Settings) -> Result<openai::OpenAiEmbedder, String> {
    let (Some(base_url), Some(model)) = (&config.base_url, &config.model) else {
        return Err("--embedder openai needs --embedder-base-url and --embedder-model".into());
    };
    let mut settings = openai::OpenAiConfig::new(base_url.clone(), model.clone());
    settings.api_key = config.api_key.clone();
    settings.dimensions = config.dimensions;
    let embedder = openai::OpenAiEmbedder::new(settings).map_err(|e| e.to_string())?;
    // Learn the vector length now; an endpoint that is down or hangs must not stop the
    // server, nor keep it from serving for long (episodes stay queued until it answers,
    // and the length is learnt from its first answer).
    let error = match tokio::time::timeout(STARTUP_PROBE, embedder.probe()).await {
        Ok(Ok(_)) => return Ok(embedder),
        Ok(Err(err)) => err.to_string(),
        Err(_) => format!("no answer within {STARTUP_PROBE:?}"),
    };
    tracing::warn!(%error, endpoint = embedder.endpoint(), "embeddings endpoint not answering yet");
    Ok(embedder)
}
