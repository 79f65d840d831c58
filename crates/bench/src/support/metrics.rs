//! Reading a server's Prometheus exposition (`--metrics-listen`). Self-contained (no
//! `super`), so a benchmark can include it by path.

use std::collections::BTreeMap;

/// A loopback port free right now (for `--metrics-listen`, which logs the address it was
/// given rather than the one bound).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port())
}

/// One scrape of `url` (`http://HOST:PORT/metrics`).
pub async fn scrape(client: &reqwest::Client, url: &str) -> Result<Exposition, reqwest::Error> {
    let text = client
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    Ok(Exposition::parse(&text))
}

/// The samples of one scrape: `(name, labels, value)`.
#[derive(Debug, Default, Clone)]
pub struct Exposition {
    pub samples: Vec<(String, BTreeMap<String, String>, f64)>,
    /// Metric families named by `# TYPE` lines.
    pub families: Vec<String>,
}

impl Exposition {
    pub fn parse(text: &str) -> Exposition {
        let mut exposition = Exposition::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                if let Some(name) = rest.split_whitespace().next() {
                    exposition.families.push(name.to_string());
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = match line.rsplit_once(' ') {
                Some(parts) => parts,
                None => continue,
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, parse_labels(labels.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            exposition.samples.push((name.to_string(), labels, value));
        }
        exposition
    }

    /// The sum of the samples named `name` whose labels include every pair of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
            })
            .fold(0.0, |sum, (_, _, v)| sum + v)
    }
}

/// `a="x",b="y"` (no escaped quotes or commas in the values we read).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            Some((
                key.trim().to_string(),
                value.trim().trim_matches('"').to_string(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_samples_by_name_and_labels() {
        let text = "# TYPE memmachine_semantic_events counter\n\
                    memmachine_semantic_events_total{event=\"messages_ingested\"} 40\n\
                    memmachine_llm_calls_total{purpose=\"extraction\",outcome=\"ok\"} 2\n\
                    memmachine_llm_calls_total{purpose=\"summary\",outcome=\"ok\"} 1\n\
                    # EOF\n";
        let e = Exposition::parse(text);
        assert_eq!(e.families, ["memmachine_semantic_events"]);
        assert_eq!(
            e.sum(
                "memmachine_semantic_events_total",
                &[("event", "messages_ingested")]
            ),
            40.0
        );
        assert_eq!(e.sum("memmachine_llm_calls_total", &[]), 3.0);
        assert_eq!(
            e.sum("memmachine_llm_calls_total", &[("purpose", "summary")]),
            1.0
        );
    }
}
