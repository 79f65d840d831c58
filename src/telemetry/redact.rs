//! The last guard before a log line leaves the process: every secret the operator
//! configured (URL passwords, secret query values, API keys) is masked in whatever a
//! library prints, at any level. Libraries log URLs and connect options their own way
//! (sqlx its unknown parameters at WARN, the HTTP clients their connect targets at
//! DEBUG), so redacting at the source alone cannot be complete.

use std::io::{self, Write};
use std::sync::Arc;

use tracing_subscriber::fmt::MakeWriter;

/// Masks `secrets` (longest first, each also as JSON and `Debug` escape it) in what
/// `inner` writes.
#[derive(Clone)]
pub struct Redacting<M> {
    inner: M,
    secrets: Arc<[String]>,
}

impl<M> Redacting<M> {
    pub fn new(inner: M, secrets: &[String]) -> Redacting<M> {
        let mut all: Vec<String> = Vec::new();
        for secret in secrets.iter().filter(|s| !s.is_empty()) {
            let json = serde_json::to_string(secret).unwrap_or_default();
            let debug = format!("{secret:?}");
            for form in [
                secret.clone(),
                json.trim_matches('"').to_string(),
                debug.trim_matches('"').to_string(),
            ] {
                if !form.is_empty() && !all.contains(&form) {
                    all.push(form);
                }
            }
        }
        // A longer secret containing a shorter one is masked whole.
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redacting {
            inner,
            secrets: all.into(),
        }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Redacting<M> {
    type Writer = RedactingWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter {
            inner: self.inner.make_writer(),
            secrets: self.secrets.clone(),
        }
    }
}

/// One event's writer. The formatter writes an event's whole line in one call, so a
/// secret is never split between two writes.
pub struct RedactingWriter<W> {
    inner: W,
    secrets: Arc<[String]>,
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        if !self.secrets.iter().any(|s| text.contains(s.as_str())) {
            self.inner.write_all(buf)?;
            return Ok(buf.len());
        }
        let mut masked = text.into_owned();
        for secret in self.secrets.iter() {
            masked = masked.replace(secret.as_str(), memmachine_core::urls::MASK);
        }
        self.inner.write_all(masked.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_in_every_form() {
        let out = std::sync::Mutex::new(Vec::<u8>::new());
        let redacting = Redacting::new(
            || SharedVec(&out),
            &["pa\"ss-word".to_string(), "tok".to_string()],
        );
        write!(
            redacting.make_writer(),
            "a=pa\"ss-word b=\"pa\\\"ss-word\" c=token-free"
        )
        .unwrap();
        let written = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        assert_eq!(written, "a=*** b=\"***\" c=***en-free");
    }

    struct SharedVec<'a>(&'a std::sync::Mutex<Vec<u8>>);

    impl Write for SharedVec<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
}
