//! HAProxy and nginx (Debian's packages) in front of replicas, run from the very
//! configurations under `deploy/`, for the tests of a mesh as its users run it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::child::Supervised;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    HAProxy,
    Nginx,
}

impl Kind {
    fn program(self) -> &'static str {
        match self {
            Kind::HAProxy => "haproxy",
            Kind::Nginx => "nginx",
        }
    }
}

/// How calls are spread over the replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// As `deploy/` configures it: by the project's routing key.
    Affinity,
    /// Round robin, the same configuration otherwise (the comparison without affinity).
    RoundRobin,
}

/// Where a replica listens: gRPC, and the REST gateway whose health route the proxy
/// checks.
#[derive(Debug, Clone, Copy)]
pub struct Upstream {
    pub grpc: SocketAddr,
    pub rest: SocketAddr,
}

/// A running proxy; stopped when dropped.
pub struct Proxy {
    child: Supervised,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

/// The proxy's program, or `None` (with a note) on a machine without it; under CI
/// (`CI=true`, where `.ci/run` installs both) its absence fails the test.
pub fn available(kind: Kind) -> Option<PathBuf> {
    let name = kind.program();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        super::cannot_run(
            &format!("a test through {name}"),
            &format!("{name} is not installed (.ci/run installs it with apt-get)"),
        );
    }
    found
}

fn deploy_file(path: &str) -> String {
    let full = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/").to_string() + path;
    std::fs::read_to_string(&full).unwrap_or_else(|err| panic!("read {full}: {err}"))
}

/// The environment `deploy/`'s configurations read.
fn environment(listen: SocketAddr, upstreams: &[Upstream]) -> Vec<(String, String)> {
    let mut vars = vec![("MEMMACHINE_PROXY_LISTEN".to_string(), listen.to_string())];
    for (i, upstream) in upstreams.iter().enumerate() {
        let n = i + 1;
        vars.push((format!("MEMMACHINE_REPLICA_{n}"), upstream.grpc.to_string()));
        vars.push((
            format!("MEMMACHINE_REPLICA_{n}_HEALTH_PORT"),
            upstream.rest.port().to_string(),
        ));
    }
    vars
}

/// `${NAME}` replaced by its value, as `envsubst` renders nginx's templates.
fn render(template: &str, vars: &[(String, String)]) -> String {
    let mut text = template.to_string();
    for (name, value) in vars {
        text = text.replace(&format!("${{{name}}}"), value);
    }
    assert!(
        !text
            .lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains("${")),
        "a variable of the template was left unset:\n{text}"
    );
    text
}

impl Proxy {
    /// Starts `kind` on `listen` in front of the three `upstreams`, or `None` when it is
    /// not installed (see `available`).
    pub fn start(
        kind: Kind,
        balance: Balance,
        listen: SocketAddr,
        upstreams: &[Upstream],
    ) -> Option<Proxy> {
        assert_eq!(upstreams.len(), 3, "deploy/ configures three replicas");
        let program = available(kind)?;
        let dir = tempfile::tempdir().unwrap();
        let vars = environment(listen, upstreams);
        let mut command = Command::new(program);
        match kind {
            Kind::HAProxy => {
                let mut config = deploy_file("haproxy/haproxy.cfg");
                if balance == Balance::RoundRobin {
                    config = swap(
                        &config,
                        "balance hdr(x-memmachine-project)",
                        "balance roundrobin",
                    );
                }
                let path = dir.path().join("haproxy.cfg");
                std::fs::write(&path, config).unwrap();
                // -db: in the foreground, one process.
                command.arg("-db").arg("-f").arg(&path);
                command.envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            }
            Kind::Nginx => {
                let mut site = render(&deploy_file("nginx/memmachine.conf.template"), &vars);
                if balance == Balance::RoundRobin {
                    site = swap(&site, "hash $http_x_memmachine_project consistent;", "");
                }
                std::fs::write(dir.path().join("memmachine.conf"), site).unwrap();
                // The main context a distribution's nginx.conf would give, kept in the
                // test's directory; one process, so that nothing outlives the test.
                let main = format!(
                    "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\n\
                     error_log stderr warn;\nevents {{ worker_connections 1024; }}\n\
                     http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  \
                     proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
                     uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
                     include {d}/memmachine.conf;\n}}\n",
                    d = dir.path().display()
                );
                let path = dir.path().join("nginx.conf");
                std::fs::write(&path, main).unwrap();
                command
                    .arg("-e")
                    .arg("stderr")
                    .arg("-p")
                    .arg(dir.path())
                    .arg("-c")
                    .arg(&path);
            }
        }
        command.stdin(Stdio::null()).stdout(Stdio::null());
        let mut child = Supervised::spawn(
            kind.program(),
            &mut command,
            Some("MEMMACHINE_TEST_PROXY_LOG"),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect_timeout(&listen, Duration::from_millis(200)).is_err() {
            child.assert_running();
            assert!(
                Instant::now() < deadline,
                "{} did not listen on {listen}",
                kind.program()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Proxy {
            child,
            addr: listen,
            _dir: dir,
        })
    }

    /// Fails the test (with the proxy's last words) if it has exited.
    pub fn assert_running(&mut self) {
        self.child.assert_running();
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// `text` with `from` (which must be there) replaced by `to`.
fn swap(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the configuration no longer says {from:?}"
    );
    text.replace(from, to)
}
